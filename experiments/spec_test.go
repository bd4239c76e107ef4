package experiments

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fabric-emu/fabric/internal/yamlfile"
)

// Every built-in scenario parses, in both variants, and its quick variant
// expands to a sweep short enough for CI.
func TestBuiltinsParse(t *testing.T) {
	names := Builtins()
	want := []string{"homa/pacer", "homa/priorities", "homa/slowdown", "homa/slowdown-fattree", "hull/dynamic", "hull/pq-sweep", "hull/qos", "hull/rtt-sweep", "hull/static", "hull/table1", "incast/fattree-k4", "ndp/incast", "ndp/permutation", "ndp/priority", "permutation/fattree-k4", "swp/capacity", "swp/capacity-loose", "swp/capacity-tight", "swp/fig1", "validate/dctcp", "validate/delay", "validate/droptail", "validate/md1", "validate/phantom"}
	if strings.Join(names, ",") != strings.Join(want, ",") {
		t.Fatalf("built-ins = %v, want %v", names, want)
	}
	for _, n := range names {
		s, err := Builtin(n)
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		q := s.WithQuick()
		q = q.scaledBy(q.runnableScale()) // its traffic as it runs
		budget := len(q.Points()) * q.Trials * int(q.Duration.Seconds())
		if q.Search != nil { // a search runs up to its trial budget per scheme
			budget = 0
			for _, scheme := range q.sweptSchemes() {
				budget += q.searchConfig(scheme).MaxTrials * int(q.Duration.Seconds())
			}
		}
		if budget > 60 {
			t.Errorf("%s: quick variant generates %d s of traffic, want <= 60", n, budget)
		}
		if len(s.Points()) < len(q.Points()) {
			t.Errorf("%s: full variant has fewer points than quick", n)
		}
		t.Logf("%s: full %d points x %d trials x %v; quick %d points x %d x %v", n,
			len(s.Points()), s.Trials, s.Duration, len(q.Points()), q.Trials, q.Duration)
	}
}

const goodExperiment = `name: t
lab:
  name: tlab
  topology: {kind: star, hosts: 4}
  links: {rate: 100Mbit}
schemes:
  tcp: {cc: cubic, ports: {buffer: 70KB}}
  dctcp: {cc: dctcp, ports: {marking: {ecn: {threshold: 3KB}}}}
traffic: {pattern: dynamic, workload: hull_1k_10m, client: h0, servers: rest}
sweep: {scheme: all, load: [0.2, 0.4]}
duration: 5s
measure: {lmm: {switch: s0, from: [eth1], to: eth0}}
`

func TestSweepExpansion(t *testing.T) {
	s, err := Parse("good.yaml", []byte(goodExperiment), "")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range s.Points() {
		names = append(names, p.Name)
	}
	if got := strings.Join(names, " "); got != "tcp_load20 dctcp_load20 tcp_load40 dctcp_load40" {
		t.Errorf("points = %s", got)
	}
	if s.Trials != 1 {
		t.Errorf("trials default = %d, want 1", s.Trials)
	}
	if a, b := TrialSeed(7, "load20", 1), TrialSeed(7, "load20", 1); a != b {
		t.Error("trial seed not reproducible")
	}
	if a, b := TrialSeed(7, "load20", 1), TrialSeed(7, "load20", 2); a == b {
		t.Error("trials share a seed")
	}
}

// A quick variant reruns flagged trials only when it says so itself.
func TestQuickVariantKeepsItsOwnReruns(t *testing.T) {
	full := goodExperiment + "reruns: 2\n"
	for _, c := range []struct {
		quick      string
		full, fast int
	}{{"", 2, 0}, {"quick: {trials: 1}\n", 2, 0}, {"quick: {reruns: 1}\n", 2, 1}} {
		s, err := Parse("good.yaml", []byte(full+c.quick), "")
		if err != nil {
			t.Fatal(err)
		}
		if s.Reruns != c.full || s.WithQuick().Reruns != c.fast {
			t.Errorf("%q: reruns %d, quick %d; want %d, %d", c.quick, s.Reruns, s.WithQuick().Reruns, c.full, c.fast)
		}
	}
}

// Bad experiment files are rejected with file:line and the field, before
// anything is built (Parse touches no kernel state).
func TestBadExperimentsNameFileAndLine(t *testing.T) {
	cases := []struct {
		name, from, to string
		line           int
		want           string
	}{
		{"unknown scheme key", "tcp: {cc: cubic, ports: {buffer: 70KB}}", "tcp: {cc: cubic, colour: red}", 7, `unknown key "colour"`},
		{"sweep over a missing field", "sweep: {scheme: all, load: [0.2, 0.4]}", "sweep: {scheme: all, load: [0.2], flows: [2]}", 10, `sweep.flows: the dynamic pattern has no field "flows"`},
		{"sweep over an unknown field", "sweep: {scheme: all, load: [0.2, 0.4]}", "sweep: {scheme: all, rate: [1]}", 10, `unknown key "rate"`},
		{"load of 1", "load: [0.2, 0.4]", "load: [0.2, 1.0]", 10, "sweep.load[1]: want a fraction"},
		{"traffic load above 1", "servers: rest}", "servers: rest, load: 1.5}", 9, "traffic.load"},
		{"unknown scheme in sweep", "scheme: all,", "scheme: [tcp, reno],", 10, `sweep.scheme[1]: no scheme "reno"`},
		{"unknown cc", "cc: cubic, ports", "cc: vegas, ports", 7, `schemes.tcp.cc: unknown congestion control "vegas"`},
		{"no such host", "client: h0", "client: h9", 9, `traffic.client: lab tlab has no host "h9"`},
		{"no such lmm port", "to: eth0}", "to: eth7}", 12, `measure.lmm.to: switch s0 has no interface "eth7"`},
		{"bad lab inline", "kind: star, hosts: 4", "kind: star, hosts: 1", 4, "lab.topology.hosts"},
		{"threshold above buffer", "threshold: 3KB", "threshold: 300KB", 8, "schemes.dctcp.ports"},
		{"negative grace", "tcp: {cc: cubic, ports: {buffer: 70KB}}", "tcp: {cc: cubic, stop_grace: -1s, ports: {buffer: 70KB}}", 7, "schemes.tcp.stop_grace: want a non-negative duration"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if !strings.Contains(goodExperiment, c.from) {
				t.Fatalf("test bug: %q not in the good file", c.from)
			}
			text := strings.Replace(goodExperiment, c.from, c.to, 1)
			_, err := Parse("bad.yaml", []byte(text), "")
			var ye *yamlfile.Error
			if !errors.As(err, &ye) {
				t.Fatalf("error %v (%T) is not a *yamlfile.Error", err, err)
			}
			if ye.File != "bad.yaml" || ye.Line != c.line || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %q (line %d), want bad.yaml:%d ... %q", err, ye.Line, c.line, c.want)
			}
		})
	}
}

// A lab given by path is read relative to the experiment file.
func TestLabByPath(t *testing.T) {
	dir := t.TempDir()
	lab := "name: plab\ntopology: {kind: star, hosts: 3}\nlinks: {rate: 100Mbit}\n"
	if err := os.WriteFile(filepath.Join(dir, "lab.yaml"), []byte(lab), 0o644); err != nil {
		t.Fatal(err)
	}
	exp := "name: p\nlab: lab.yaml\nschemes: {tcp: {cc: cubic}}\ntraffic: {pattern: static, client: h1, servers: h0}\nduration: 1s\n"
	file := filepath.Join(dir, "exp.yaml")
	if err := os.WriteFile(file, []byte(exp), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := Load(file)
	if err != nil {
		t.Fatal(err)
	}
	if s.LabSpec.Name != "plab" {
		t.Errorf("lab = %s", s.LabSpec.Name)
	}
	bad := strings.Replace(exp, "lab.yaml", "missing.yaml", 1)
	os.WriteFile(file, []byte(bad), 0o644)
	if _, err := Load(file); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("missing lab file: %v", err)
	}
}

// A run records where its experiment came from, so --resume DIR alone can
// open it again: a built-in by name, a file by path.
func TestSourceOfRun(t *testing.T) {
	s, err := Builtin("hull/dynamic")
	if err != nil {
		t.Fatal(err)
	}
	if got := SourceOf(&RunFile{File: s.File}); got != "hull/dynamic" {
		t.Errorf("built-in source = %q", got)
	}
	if got := SourceOf(&RunFile{File: "/tmp/my.yaml"}); got != "/tmp/my.yaml" {
		t.Errorf("file source = %q", got)
	}
	if _, err := Open(SourceOf(&RunFile{File: s.File})); err != nil {
		t.Error(err)
	}
}

// The priority pattern's fields, wrong, name their line and field.
func TestBadPriorityTraffic(t *testing.T) {
	const good = "name: p\nlab: {name: plab, topology: {kind: star, hosts: 4}}\nschemes: {ndp: {transport: ndp, ports: {ndp: {}}}}\n" +
		"traffic: {pattern: priority, client: h0, servers: rest, size: 200KB, long_size: 1MB}\nsweep: {scheme: all, senders: [0, 2]}\nduration: 1s\n"
	if _, err := Parse("good.yaml", []byte(good), ""); err != nil {
		t.Fatalf("good file: %v", err)
	}
	for _, c := range []struct{ from, to, want string }{
		{", long_size: 1MB}", "}", "bad.yaml:4: traffic.long_size: the priority pattern needs the long messages' size"},
		{"size: 200KB, ", "", "bad.yaml:4: traffic.size: the priority pattern needs the short message's size"},
		{"senders: [0, 2]", "senders: [0, 3]", "bad.yaml:5: sweep.senders[1]: want 0..2, got 3"},
	} {
		_, err := Parse("bad.yaml", []byte(strings.Replace(good, c.from, c.to, 1)), "")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q → %q: got %v, want %q", c.from, c.to, err, c.want)
		}
	}
}
