package emu_test

import (
	"errors"
	"testing"

	"github.com/fabric-emu/fabric/emu"
)

// Code outside the module can take a bad lab file's error apart.
func TestFileErrorIsExported(t *testing.T) {
	_, err := emu.Parse("lab.yaml", []byte("name: x\ntopology: {kind: star, hosts: 2}\nlinks: {rate: fast}\n"))
	var fe *emu.FileError
	if !errors.As(err, &fe) {
		t.Fatalf("err %v (%T) is not an *emu.FileError", err, err)
	}
	if fe.File != "lab.yaml" || fe.Line != 3 || fe.Field != "links.rate" {
		t.Fatalf("file %q line %d field %q: %v", fe.File, fe.Line, fe.Field, fe)
	}
}
