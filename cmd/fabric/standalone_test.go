package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fabric-emu/fabric/internal/testenv"
)

// The fabric binary, copied alone into an empty directory with no
// checkout above it and no workload directory in its environment, runs a
// built-in scenario whose workload only the binary carries.
func TestBinaryAloneRunsABuiltin(t *testing.T) {
	testenv.RequireRoot(t)
	bin, remove, err := testenv.BuildFabric()
	if err != nil {
		t.Fatal(err)
	}
	defer remove()
	dir := t.TempDir()
	alone := filepath.Join(dir, "fabric")
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(alone, b, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, alone, "run", "hull/dynamic", "--quick", "--out", filepath.Join(dir, "runs"))
	cmd.Dir = dir
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FABRIC_WORKLOADS=") && !strings.HasPrefix(kv, "FABRIC_BINARY=") {
			env = append(env, kv)
		}
	}
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s run hull/dynamic --quick: %v\n%s", alone, err, out)
	}
	if !strings.Contains(string(out), "## Switch latency and flow completion") || !strings.Contains(string(out), "trials (0 already complete)") {
		t.Fatalf("no report in the output:\n%s", out)
	}
	t.Logf("%s", out[max(0, len(out)-300):])
}
