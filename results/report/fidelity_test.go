package report

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The files carry the verdict, derived from the record as it is written
// (so it follows anything added to it), and read back to the same record;
// fidelity.json's old name for the lowest idle share is still read.
func TestFidelityWritesItsVerdict(t *testing.T) {
	for _, c := range []struct {
		f    Fidelity
		want string
	}{
		{Fidelity{MinCPUIdlePct: 40}, `"unfaithful":false`},
		{Fidelity{DelayLines: &DelayFidelity{Late: true, LatenessP99US: 230, LimitUS: 200}}, `"unfaithful":true`},
		{Fidelity{DelayLines: &DelayFidelity{Unasked: 3}}, `"unfaithful":true`},
		{Fidelity{DelayLinesUnfaithful: true}, `"unfaithful":true`},
	} {
		b, err := json.Marshal(&c.f)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), c.want) {
			t.Errorf("%s lacks %s", b, c.want)
		}
		var back Fidelity
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if back.Faithful() != c.f.Faithful() || back.MinCPUIdlePct != c.f.MinCPUIdlePct || back.Flags() != c.f.Flags() {
			t.Errorf("read back %+v from %s, want %+v", back, b, c.f)
		}
	}
	var old Fidelity
	if err := json.Unmarshal([]byte(`{"cpu_min_idle_pct": 36.4, "unfaithful": true}`), &old); err != nil || old.MinCPUIdlePct != 36.4 {
		t.Errorf("old fidelity.json read as %+v (%v)", old, err)
	}
}

// The runner writes the captures' drops into meta.json's record, and the
// captures' statistics files hold the same drops: the loader counts them
// once, from the files, and the verdict it loads follows them.
func TestCaptureDropsCountedOnce(t *testing.T) {
	dir, _ := trialDir(t, t.TempDir(), "tcp-droptail", 0.4, 1, 1, 17)
	b, err := os.ReadFile(filepath.Join(dir, MetaFile))
	if err != nil {
		t.Fatal(err)
	}
	var meta map[string]any
	if err := json.Unmarshal(b, &meta); err != nil {
		t.Fatal(err)
	}
	meta["fidelity"] = Fidelity{CaptureDrops: 17}
	if b, err = json.Marshal(meta); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, MetaFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
	sum, err := LoadTrial(dir)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Fidelity.CaptureDrops != 17 || sum.Fidelity.Faithful() {
		t.Errorf("capture drops %d (faithful %v), want 17 counted once and a flagged trial", sum.Fidelity.CaptureDrops, sum.Fidelity.Faithful())
	}
}

// The hypervisor's steal flags a trial by the share of an open-loop
// port's traffic it can have perturbed, σ/(1 − ρ), past the share the
// CPU-saturation rule allows: the M/D/1 validation's trials (10 Mbit/s
// port, Poisson packets) at the steal they met, where the mean wait came
// out 2.5 times Pollaczek–Khinchine's at ρ = 0.9 and within 2 % below.
// Closed-loop flows and bursts, which have no steady rate to expect, stop
// with the port and are judged by lateness and saturation alone.
func TestStealJudgedByTheOpenLoopPortsLoad(t *testing.T) {
	port := func(load float64) []PortRate {
		return []PortRate{{Port: "s0:eth0", ConfiguredBPS: 10e6, ExpectedBPS: load * 10e6}}
	}
	for _, c := range []struct {
		name   string
		f      Fidelity
		stolen bool
	}{
		{"md1 ρ=0.3", Fidelity{CPUStealPct: 1.9, Ports: port(0.3)}, false},
		{"md1 ρ=0.6", Fidelity{CPUStealPct: 3.0, Ports: port(0.6)}, false},
		{"md1 ρ=0.9", Fidelity{CPUStealPct: 3.9, Ports: port(0.9)}, true},
		{"ρ=0.9 on a quiet machine", Fidelity{CPUStealPct: 0.5, Ports: port(0.9)}, false},
		{"long-lived flows", Fidelity{CPUStealPct: 8.3, Ports: port(1)}, false},
		{"incast", Fidelity{CPUStealPct: 8.3, Ports: port(0)}, false},
		{"no port watched", Fidelity{CPUStealPct: 30}, false},
	} {
		if c.f.Stolen() != c.stolen || c.f.Faithful() == c.stolen || strings.Contains(c.f.Flags(), "steal") != c.stolen {
			share, load := c.f.StealHarm()
			t.Errorf("%s: stolen %v, faithful %v, flags %s (harm %.3f at load %.2f), want stolen %v",
				c.name, c.f.Stolen(), c.f.Faithful(), c.f.Flags(), share, load, c.stolen)
		}
	}
	// The busiest open-loop port sets the load: the same steal that a
	// port at 0.3 hides, one at 0.9 beside it does not.
	two := Fidelity{CPUStealPct: 3.9, Ports: append(port(0.3), port(0.9)...)}
	if share, load := two.StealHarm(); load < 0.8999 || load > 0.9001 || share < 0.38 || share > 0.40 {
		t.Errorf("two ports: harm %.3f at load %.2f, want 0.39 at 0.9", share, load)
	}
}

// A trial's carried load is what the busiest open-loop port carried of its
// rate, whatever it was asked to: closed-loop ports and idle ones say
// nothing of the trial's load.
func TestCarriedLoadIsTheBusiestOpenLoopPorts(t *testing.T) {
	at := func(port string, expected, achieved float64) PortRate {
		return PortRate{Port: port, ConfiguredBPS: 50e6, ExpectedBPS: expected * 50e6, AchievedBPS: achieved * 50e6}
	}
	for _, c := range []struct {
		name  string
		ports []PortRate
		want  float64
		ok    bool
	}{
		{"a 60 % point whose draw carried 50 %", []PortRate{at("s0:eth0", 0.6, 0.5)}, 0.5, true},
		{"the busiest of two", []PortRate{at("s0:eth1", 0.2, 0.25), at("s0:eth0", 0.6, 0.45)}, 0.45, true},
		{"long-lived flows", []PortRate{at("s0:eth0", 1, 0.97)}, 0, false},
		{"an open-loop port that carried nothing", []PortRate{at("s0:eth0", 0.4, 0)}, 0, false},
		{"no port watched", nil, 0, false},
	} {
		got, ok := Fidelity{Ports: c.ports}.CarriedLoad()
		if ok != c.ok || math.Abs(got-c.want) > 1e-9 {
			t.Errorf("%s: carried %.3f (%v), want %.3f (%v)", c.name, got, ok, c.want, c.ok)
		}
	}
}
