package main

import (
	"context"
	"strings"
	"testing"
)

// `fabric endpoint` rejects bad input with exit code 2 before it opens
// anything: a load ≥ 1 names the flag, a non-monotone workload names its
// file and line.
func TestEndpointAndTransportBadInput(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"endpoint", "probe", "--host", "h0", "--to", "nowhere"}, "--to: "},
		{[]string{"endpoint", "probe", "--host", "h0", "--to", "10.0.0.2", "--dscp", "CS9"}, "--dscp: "},
		{[]string{"transport", "carrier-pigeon"}, `no transport "carrier-pigeon" (have `},
		{[]string{"transport", "tcp"}, "FABRIC_HOST is not set"},
	}
	for _, c := range cases {
		code, out := runFabric(context.Background(), c.args...)
		if code != exitBadInput || !strings.Contains(out, c.want) {
			t.Errorf("fabric %s: exit %d, output %q; want exit 2 and %q", strings.Join(c.args, " "), code, out, c.want)
		}
	}
}
