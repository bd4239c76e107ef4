package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// `fabric endpoint` rejects bad input with exit code 2 before it opens
// anything: a load ≥ 1 names the flag, a non-monotone workload names its
// file and line.
func TestEndpointBadInput(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.cdf")
	if err := os.WriteFile(bad, []byte("100 0.5\n200 0.3\n300 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	base := []string{"endpoint", "dynamic", "--host", "h0", "--run-dir", t.TempDir(), "--peer", "10.0.0.2",
		"--link-rate", "100Mbit", "--duration", "1s"}
	cases := []struct {
		args []string
		want string
	}{
		{append(base, "--workload", "hull_1k_10m", "--load", "1"), "--load: want a fraction of the link rate in (0, 1), got 1"},
		{append(base, "--workload", bad, "--load", "0.4"), bad + ":2: cdf: CDF must not decrease"},
		{append(base, "--workload", "no_such_workload", "--load", "0.4"), `workload "no_such_workload"`},
		{[]string{"endpoint", "flood", "--host", "h0", "--run-dir", "/tmp"}, "PATTERN: unknown pattern"},
	}
	for _, c := range cases {
		code, out := runFabric(context.Background(), c.args...)
		if code != exitBadInput || !strings.Contains(out, c.want) {
			t.Errorf("fabric %s: exit %d, output %q; want exit 2 and %q", strings.Join(c.args, " "), code, out, c.want)
		}
	}
}
