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
// checkout above it and no workload directory in its environment, answers
// a built-in scenario whose workloads only the binary carries (by SWP's
// model: no lab), and runs a lab whose hosts start the binary's own
// transports on a built-in workload.
func TestBinaryAloneRunsABuiltin(t *testing.T) {
	testenv.RequireRoot(t)
	bin := fabricBinary(t)
	dir := t.TempDir()
	alone := filepath.Join(dir, "fabric")
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(alone, b, 0o755); err != nil {
		t.Fatal(err)
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FABRIC_WORKLOADS=") && !strings.HasPrefix(kv, "FABRIC_BINARY=") {
			env = append(env, kv)
		}
	}
	run := func(want string, args ...string) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, alone, append([]string{"run"}, append(args, "--out", filepath.Join(dir, "runs"))...)...)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s run %v: %v\n%s", alone, args, err, out)
		}
		if !strings.Contains(string(out), want) {
			t.Fatalf("fabric run %v: no %q in the output:\n%s", args, want, out)
		}
		t.Logf("%s", out[max(0, len(out)-300):])
	}
	run("| dctcp-weights | 2:4:3:", "swp/capacity", "--quick", "--model-only")
	const small = `name: alone
lab: {name: alone, topology: {kind: star, hosts: 3}, links: {rate: 100Mbit}}
schemes: {tcp: {transport: tcp, cc: cubic}}
traffic: {pattern: dynamic, workload: hull_1k_10m, client: h0, servers: rest, load: 0.2}
duration: 2s
`
	if err := os.WriteFile(filepath.Join(dir, "alone.yaml"), []byte(small), 0o644); err != nil {
		t.Fatal(err)
	}
	// --calibrate=false: the suite measures no machine (a profile takes
	// most of a minute); without one the run has no plan.
	run("trials (0 already complete)", "alone.yaml", "--seed", "1", "--calibrate=false")
}
