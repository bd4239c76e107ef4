package experiments_test

import (
	"os/exec"
	"path/filepath"
	"testing"
)

// examples/module is a module of its own that requires fabric (through a
// replace to this checkout): it must build, which proves that the API it
// uses is importable from outside and says enough to build and run an
// experiment.
func TestExampleModuleBuilds(t *testing.T) {
	cmd := exec.Command("go", "build", "-o", filepath.Join(t.TempDir(), "fabricdemo"), ".")
	cmd.Dir = filepath.Join("..", "examples", "module")
	cmd.Env = append(cmd.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build in examples/module: %v\n%s", err, out)
	}
}
