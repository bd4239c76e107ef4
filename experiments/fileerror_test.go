package experiments_test

import (
	"errors"
	"testing"

	"github.com/fabric-emu/fabric/experiments"
)

// Code outside the module can take a bad experiment file's error apart.
func TestFileErrorIsExported(t *testing.T) {
	_, err := experiments.Parse("exp.yaml", []byte("name: x\nlab: {name: y, topology: {kind: star, hosts: 2}}\nschemes: {a: {cc: cubic}}\ntraffic: {pattern: sideways}\nduration: 1s\n"), t.TempDir())
	var fe *experiments.FileError
	if !errors.As(err, &fe) {
		t.Fatalf("err %v (%T) is not an *experiments.FileError", err, err)
	}
	if fe.File != "exp.yaml" || fe.Line != 4 || fe.Field != "traffic.pattern" {
		t.Fatalf("file %q line %d field %q: %v", fe.File, fe.Line, fe.Field, fe)
	}
}
