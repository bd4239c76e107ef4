package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fabric-emu/fabric/experiments"
	"github.com/fabric-emu/fabric/experiments/cost"
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

// The plan's bad input: a machine profile from another machine, a
// --max-wall that no rung meets, --scale auto beside a paper rate, and a
// --scale that is neither auto nor a number, each exit 2 with its file
// and line, or one line for a flag; a good plan prints its table.
func TestPlanBadInput(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	exp := write("paper.yaml", "name: p\nlab: {name: p, topology: {kind: star, hosts: 2}, links: {rate: 10Gbit}}\nscale: auto\n"+
		"schemes: {tcp: {cc: cubic}}\ntraffic: {pattern: static, client: h1, servers: h0, flows: 1}\nduration: 100ms\n")
	emuFile := write("emu.yaml", "name: p\nlab: {name: p, topology: {kind: star, hosts: 2}}\nscale: {paper_rate: 10Gbit}\n"+
		"schemes: {tcp: {cc: cubic}}\ntraffic: {pattern: static, client: h1, servers: h0, flows: 1}\nduration: 1s\n")
	here := cost.Here(experiments.BuildVersion().String())
	prof := &cost.Profile{Kernel: here.Kernel, CPUModel: here.CPUModel, CPUs: here.CPUs, Fabric: here.Fabric, Date: time.Now(),
		Costs: cost.Costs{HopUS: 15, Transports: map[string]cost.Transport{"tcp": {}}, Trial: cost.TrialTime{FixedS: 1}}}
	good := filepath.Join(dir, "machine.json")
	if err := prof.Write(good); err != nil {
		t.Fatal(err)
	}
	prof.CPUModel += " (another)"
	other := filepath.Join(dir, "other.json")
	if err := prof.Write(other); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"run", exp, "--plan", "--profile", other}, other + ":3: cpu_model: a profile from another machine"},
		{[]string{"run", exp, "--plan", "--profile", good, "--max-wall", "2s"}, "--max-wall 2s: the run is predicted to take 3s at the least s"},
		{[]string{"run", emuFile, "--plan", "--profile", good, "--scale", "auto"}, emuFile + ":3: scale: --scale auto scales a file written at the paper's"},
		{[]string{"run", exp, "--plan", "--profile", good, "--scale", "fast"}, "--scale: want auto or a factor of at least 1"},
	} {
		code, out := runFabric(context.Background(), c.args...)
		if code != exitBadInput || !strings.Contains(out, c.want) {
			t.Errorf("fabric %s: exit %d, output %q; want exit 2 and %q", strings.Join(c.args, " "), code, out, c.want)
		}
	}
	code, out := runFabric(context.Background(), "run", exp, "--plan", "--profile", good)
	if code != exitOK || !strings.Contains(out, "tcp    20") || !strings.Contains(out, "wall time: 3s for 1 trial") {
		t.Errorf("a good plan: exit %d, output %q", code, out)
	}
}
