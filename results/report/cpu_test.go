package report

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Two samples of a two-CPU machine, 0.1 s each (20 ticks of machine
// time each, 40 in all), worked by hand.
func handAccount() *CPUAccount {
	others := uint64(2)
	return &CPUAccount{CPUs: 2, TicksPerSecond: 100, Others: &others, Hosts: map[string]uint64{"h0": 8, "h1": 2},
		Samples: []CPUSample{
			{Seconds: 0.1, Total: 20, Idle: 8, Steal: 1, Softirq: []uint64{1, 2}, Transports: 4, Probes: 1,
				Fabric: 5, DelayLines: 2, Captures: 1, Pacers: 1},
			{Seconds: 0.2, Total: 20, Idle: 4, Steal: 1, Softirq: []uint64{0, 3}, Transports: 6,
				Fabric: 7, DelayLines: 3, Pacers: 2, Sampler: 1},
		}}
}

func TestCPUSharesByHand(t *testing.T) {
	a := handAccount()
	got, ok := a.Shares(nil)
	if !ok {
		t.Fatal("no shares")
	}
	// Of 40 ticks: transports 10, delay lines 5, captures 1 and a probe 1,
	// pacers 3, the sampler 1, fabric's rest 12 − 10 = 2, softirq 6 (1 on
	// cpu0, 5 on cpu1), steal 2, other processes 2, idle 12; the parts are
	// 33 ticks of the 28 busy ones: 5 too many, the overlap.
	want := CPUShares{Transports: 25, DelayLines: 12.5, Captures: 5, Pacers: 7.5, Sampler: 2.5, Fabric: 5, Softirq: 15,
		Steal: 5, Others: 5, Unaccounted: -12.5, Idle: 30, SoftirqByCPU: []float64{2.5, 12.5}}
	checkShares(t, "all", got, want)
	if b := got.Busy(); math.Abs(b-70) > 1e-9 {
		t.Errorf("busy %v, want 70", b)
	}
	// The second sample alone: 20 ticks, other processes unknown.
	got, _ = a.Shares(func(i int) bool { return i == 1 })
	want = CPUShares{Transports: 30, DelayLines: 15, Pacers: 10, Sampler: 5, Fabric: 5, Softirq: 15, Steal: 5,
		Others: math.NaN(), Unaccounted: -5, Idle: 20, SoftirqByCPU: []float64{0, 15}}
	checkShares(t, "second", got, want)
	if parts := got.Parts(); len(parts) != 10 || parts[len(parts)-1].Name != PartIdle {
		t.Errorf("parts without other processes: %v", parts)
	}
	largest := a.mustShares(t).Largest(3, 5)
	if len(largest) != 3 || largest[0].Name != "transports" || largest[1].Name != "softirq" || largest[2].Name != "delay lines" {
		t.Errorf("largest: %v", largest)
	}
	if l := a.mustShares(t).Largest(9, 20); len(l) != 1 || l[0].Pct != 25 {
		t.Errorf("largest above 20 %%: %v", l)
	}
	if _, ok := (&CPUAccount{CPUs: 2, TicksPerSecond: 100}).Shares(nil); ok {
		t.Error("an account without samples has shares")
	}
}

func (a *CPUAccount) mustShares(t *testing.T) CPUShares {
	s, ok := a.Shares(nil)
	if !ok {
		t.Fatal("no shares")
	}
	return s
}

func checkShares(t *testing.T, what string, got, want CPUShares) {
	t.Helper()
	eq := func(a, b float64) bool { return math.IsNaN(a) && math.IsNaN(b) || math.Abs(a-b) < 1e-9 }
	g, w := got.Parts(), want.Parts()
	if len(g) != len(w) {
		t.Fatalf("%s: parts %v, want %v", what, g, w)
	}
	for i := range g {
		if g[i].Name != w[i].Name || !eq(g[i].Pct, w[i].Pct) {
			t.Errorf("%s: %s %.3f %%, want %s %.3f %%", what, g[i].Name, g[i].Pct, w[i].Name, w[i].Pct)
		}
	}
	if !eq(got.Others, want.Others) || len(got.SoftirqByCPU) != len(want.SoftirqByCPU) {
		t.Errorf("%s: %+v, want %+v", what, got, want)
	}
	for i := range want.SoftirqByCPU {
		if !eq(got.SoftirqByCPU[i], want.SoftirqByCPU[i]) {
			t.Errorf("%s: softirq by CPU %v, want %v", what, got.SoftirqByCPU, want.SoftirqByCPU)
		}
	}
}

// A run whose trials carry the account gets the "Where the CPU went"
// table, a row's trials averaged, and a stacked figure per scheme.
func TestReportShowsWhereTheCPUWent(t *testing.T) {
	root := t.TempDir()
	for trial := 1; trial <= 2; trial++ {
		dir, _ := trialDir(t, root, "dctcp-pq950-pacer", 0.4, trial, 1, 0)
		var meta map[string]any
		b, _ := os.ReadFile(filepath.Join(dir, MetaFile))
		if err := json.Unmarshal(b, &meta); err != nil {
			t.Fatal(err)
		}
		a := handAccount()
		for s := 2; len(a.Samples) < 30; s++ { // three seconds, for the figure's points
			c := a.Samples[s%2]
			c.Seconds = float64(s+1) / 10
			a.Samples = append(a.Samples, c)
		}
		if trial == 2 { // its transports took 10 ticks more in every sample
			for i := range a.Samples {
				a.Samples[i].Transports += 10
			}
		}
		meta["cpu_account"] = a
		b, _ = json.Marshal(meta)
		if err := os.WriteFile(filepath.Join(dir, MetaFile), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	trials, err := LoadRuns(root)
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	rep, err := Write(out, trials...)
	if err != nil {
		t.Fatal(err)
	}
	s1, _ := trials[0].CPU.Shares(nil)
	s2, _ := trials[1].CPU.Shares(nil)
	mean := func(a, b float64) string { return num((a+b)/2, 1) }
	row := "| 40% | dctcp-pq950-pacer | 2 | " + mean(s1.Transports, s2.Transports) + " | " + mean(s1.DelayLines, s2.DelayLines) + " |"
	for _, want := range []string{"## Where the CPU went", "| load | scheme | trials | transports (%) | delay lines (%) |", row,
		"(" + mean(s1.SoftirqByCPU[0], s2.SoftirqByCPU[0]) + " / " + mean(s1.SoftirqByCPU[1], s2.SoftirqByCPU[1]) + ")",
		"[cpu-dctcp-pq950-pacer-load40](cpu-dctcp-pq950-pacer-load40.png)"} {
		if !strings.Contains(rep.Markdown, want) {
			t.Errorf("report.md lacks %q:\n%s", want, rep.Markdown)
		}
	}
	if s2.Transports <= s1.Transports {
		t.Errorf("the busier trial's transports: %.1f %%, the other's %.1f %%", s2.Transports, s1.Transports)
	}
	for _, f := range []string{"cpu-dctcp-pq950-pacer-load40.png", "cpu-dctcp-pq950-pacer-load40.svg"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}
}
