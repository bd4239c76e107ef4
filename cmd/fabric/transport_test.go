package main

import (
	"context"
	"strings"
	"testing"
)

// `fabric transport check` rejects bad flags with exit code 2 before it
// builds a lab.
func TestTransportCheckBadInput(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"transport", "check", "--rate", "fast", "./x"}, "--rate: "},
		{[]string{"transport", "check", "--loss", "1.5", "./x"}, "--loss wants a probability"},
		{[]string{"transport", "check", "--hosts", "1", "./x"}, "--hosts at least 2"},
		{[]string{"transport", "check", "--args", "[1]", "./x"}, "--args: want a JSON object"},
	} {
		code, out := runFabric(context.Background(), c.args...)
		if code != exitBadInput || !strings.Contains(out, c.want) {
			t.Errorf("fabric %s: exit %d, output %q; want exit 2 and %q", strings.Join(c.args, " "), code, out, c.want)
		}
	}
}
