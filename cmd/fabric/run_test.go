package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// `fabric run` rejects a bad experiment file with exit code 2 and
// file:line: field before it builds anything, and so do `--resume` of a
// directory that is not a run and `fabric report` of a missing directory.
func TestRunBadInput(t *testing.T) {
	dir := t.TempDir()
	good := "name: x\nlab: {name: a, topology: {kind: star, hosts: 3}}\nschemes: {tcp: {cc: cubic}}\n" +
		"traffic: {pattern: dynamic, workload: hull_1k_10m, client: h0, servers: rest}\nsweep: {load: [0.2]}\nduration: 1s\n"
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	unknownKey := write("key.yaml", strings.Replace(good, "{cc: cubic}", "{cc: cubic, colour: red}", 1))
	missingField := write("sweep.yaml", strings.Replace(good, "{load: [0.2]}", "{load: [0.2], senders: [2]}", 1))
	fullLoad := write("load.yaml", strings.Replace(good, "[0.2]", "[0.2, 1]", 1))
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"run", unknownKey}, unknownKey + `:3: schemes.tcp.colour: unknown key "colour"`},
		{[]string{"run", missingField}, missingField + `:5: sweep.senders: the dynamic pattern has no field "senders"`},
		{[]string{"run", fullLoad}, fullLoad + ":5: sweep.load[1]: want a fraction of the link rate in (0, 1), got 1"},
		{[]string{"run", filepath.Join(dir, "nope.yaml")}, "not a built-in scenario"},
		{[]string{"run", write("ok.yaml", good), "--resume", dir}, "is not a run directory"},
		{[]string{"report", filepath.Join(dir, "missing")}, "not a run directory"},
	}
	for _, c := range cases {
		code, out := runFabric(context.Background(), c.args...)
		if code != exitBadInput || !strings.Contains(out, c.want) {
			t.Errorf("fabric %s: exit %d, output %q; want exit 2 and %q", strings.Join(c.args, " "), code, out, c.want)
		}
	}
}
