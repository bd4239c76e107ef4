package main

import (
	"context"
	"strings"
	"testing"
)

// `fabric probe` and `fabric transport` reject bad input with exit code 2
// before they open anything, and so do probe's old names (endpoint probe,
// endpoint probe-sink), which host images of earlier builds run.
func TestProbeAndTransportBadInput(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"probe", "send", "--host", "h0", "--to", "nowhere"}, "--to: "},
		{[]string{"endpoint", "probe", "--host", "h0", "--to", "10.0.0.2", "--dscp", "CS9"}, "--dscp: "},
		{[]string{"probe", "sink", "--host", "h0", "--addr", "nowhere"}, "--addr: "},
		{[]string{"endpoint", "probe-sink", "--host", "h0", "--addr", "nowhere"}, "--addr: "},
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
