package main

import (
	"context"
	"strings"
	"testing"
)

// `fabric validate` rejects a scenario it does not have, and a directory
// that is not a finished validation run, with exit code 2, running
// nothing.
func TestValidateBadInput(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"validate", "--only", "validate/nope"}, "--only validate/nope: no such validation scenario"},
		{[]string{"validate", "--recheck", t.TempDir()}, "is not a run directory"},
	} {
		code, out := runFabric(context.Background(), c.args...)
		if code != exitBadInput || !strings.Contains(out, c.want) {
			t.Errorf("fabric %s: exit %d, want %d and %q\n%s", strings.Join(c.args, " "), code, exitBadInput, c.want, out)
		}
	}
}
