package report

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fabric-emu/fabric/hosts/transport"
	"github.com/fabric-emu/fabric/results/capture"
	"github.com/fabric-emu/fabric/results/internal/synth"
	"github.com/fabric-emu/fabric/results/lmm"
	"github.com/fabric-emu/fabric/results/stats"
)

// trialDir builds one trial directory the way a run leaves it: a synthetic
// capture pair matched by the LMM, endpoint records and meta.json.
func trialDir(t *testing.T, root, scheme string, load float64, trial int, latencyScale float64, drops uint64) (string, *lmm.Summary) {
	t.Helper()
	point := fmt.Sprintf("%s-load%g", scheme, load*100)
	dir := filepath.Join(root, "hull-dynamic", "20261123T100000", point, fmt.Sprintf("trial-%d", trial))
	if err := os.MkdirAll(filepath.Join(dir, "lmm"), 0o755); err != nil {
		t.Fatal(err)
	}
	in, out := filepath.Join(dir, "s0_eth1.pcap"), filepath.Join(dir, "s0_eth5.pcap")
	if _, err := synth.Write(in, out, synth.Spec{
		Packets: 4000, RateBPS: 1e9, Load: load * latencyScale, DropEvery: 500, FloorNS: 5000, Seed: uint64(trial),
	}, false); err != nil {
		t.Fatal(err)
	}
	sum, err := lmm.Measure(filepath.Join(dir, "lmm"), "s0", []string{in}, out, lmm.Config{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := transport.Create(dir, "h5")
	if err != nil {
		t.Fatal(err)
	}
	s0 := int64(1_800_000_000e9)
	for i := 0; i < 100; i++ {
		size, fct := int64(1000), time.Duration(300+i*int(latencyScale*10))*time.Microsecond
		if i%5 == 4 {
			size, fct = 10_000_000, time.Duration(100+i)*time.Millisecond
		}
		start := s0 + int64(i)*1e7
		w.Flow(transport.Flow{ID: uint64(i), Pattern: "dynamic", Src: "h1", Dst: "h5", Size: size, Bytes: size, StartNS: start, EndNS: start + int64(fct)})
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	// meta.json as runs wrote it before it named the pattern, the paper,
	// the sweep and the scheme, and when the achieved rate was called
	// rate_shortfall.
	meta, _ := json.Marshal(map[string]any{
		"scheme": scheme, "load": load, "trial": trial, "bottleneck_bps": 1e9, "unloaded_rtt_ns": 150_000,
		"fidelity": map[string]any{"rate_shortfall": 0.998},
		"seed":     42, "fabric_version": "test", // fields report does not read
	})
	if err := os.WriteFile(filepath.Join(dir, MetaFile), meta, 0o644); err != nil {
		t.Fatal(err)
	}
	st, _ := json.Marshal(capture.Stats{Label: "s0:eth1", Written: 4000, KernelPackets: 4000 + drops, Drops: drops})
	if err := os.WriteFile(filepath.Join(dir, "s0_eth1.stats.json"), st, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, sum
}

// A run directory from before the report followed the experiment still
// reports: rows keyed by load, a table for each kind of data it has.
func TestOldRunStillReports(t *testing.T) {
	root := t.TempDir()
	want := map[string][]float64{} // "scheme/load" → per-trial mean latency
	for _, scheme := range []string{"tcp-droptail", "dctcp-pq950-pacer"} {
		scale := 1.0
		if scheme == "dctcp-pq950-pacer" {
			scale = 0.6 // lighter queue: lower latency, which the table must show in bold
		}
		for _, load := range []float64{0.4, 0.2} {
			for trial := 1; trial <= 2; trial++ {
				var drops uint64
				if scheme == "tcp-droptail" && load == 0.4 && trial == 2 {
					drops = 17
				}
				_, s := trialDir(t, root, scheme, load, trial, scale, drops)
				key := fmt.Sprintf("%s/%g", scheme, load)
				want[key] = append(want[key], s.US.Mean)
			}
		}
	}
	trials, err := LoadRuns(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(trials) != 8 {
		t.Fatalf("loaded %d trials, want 8", len(trials))
	}
	if f := trials[0].Fidelity.RateAchievedFraction; f != 0.998 {
		t.Errorf("rate_shortfall read as rate_achieved_fraction %v, want 0.998", f)
	}
	outDir := os.Getenv("FABRIC_REPORT_DIR") // set to keep an example report
	if outDir == "" {
		outDir = filepath.Join(root, "hull-dynamic", "20261123T100000")
	}
	rep, err := Write(outDir, trials...)
	if err != nil {
		t.Fatal(err)
	}
	// Rows: loads ascending, schemes in order of appearance (trial
	// directories are loaded in path order).
	if len(rep.Rows) != 4 || rep.Rows[0].Load != 0.2 || rep.Rows[3].Load != 0.4 || rep.Rows[2].Scheme != "dctcp-pq950-pacer" || rep.Rows[3].Scheme != "tcp-droptail" {
		t.Fatalf("rows %+v", rep.Rows)
	}
	for _, r := range rep.Rows {
		w := want[fmt.Sprintf("%s/%g", r.Scheme, r.Load)]
		if mean := (w[0] + w[1]) / 2; math.Abs(r.LatAvg-mean) > 1e-9 {
			t.Errorf("%s %g: latency avg %v, want mean of trials %v", r.Scheme, r.Load, r.LatAvg, mean)
		}
		if r.Trials != 2 || math.IsNaN(r.FCT1KBAvg) || math.IsNaN(r.FCT10MBAvg) {
			t.Errorf("row %+v", r)
		}
	}
	md := rep.Markdown
	for _, s := range []string{
		"## Switch latency", "| load | scheme | trials | avg (µs) | 90th (µs) | 99th (µs) | fidelity |",
		"## Flow slowdown by size", "## Fidelity",
		"| 40% | tcp-droptail | 2 |", "1 of 2 unfaithful", "capture s0:eth1 dropped 17 of 4017 packets",
		"Lower the offered load", "[latency-vs-load](latency-vs-load.png)",
	} {
		if !strings.Contains(md, s) {
			t.Errorf("report.md lacks %q:\n%s", s, md)
		}
	}
	// Its trials sampled no account of where the CPU went.
	if strings.Contains(md, "Where the CPU went") {
		t.Errorf("a run without CPU accounts has a CPU table:\n%s", md)
	}
	// The lighter scheme has the lower latency at 40%, in bold.
	pq40 := fmt.Sprintf("**%.1f**", rep.Rows[2].LatAvg)
	if !strings.Contains(md, "| 40% | dctcp-pq950-pacer | 2 | "+pq40) {
		t.Errorf("best latency at 40%% not bold (%s):\n%s", pq40, md)
	}
	f, err := os.Open(filepath.Join(outDir, "summary.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil || len(rows) != 9 || len(rows[0]) != len(summaryColumns) {
		t.Fatalf("summary.csv: %v, %d rows", err, len(rows))
	}
	for _, name := range []string{"report.md", "latency-vs-load.png", "latency-vs-load.svg", "switch-latency-cdf-load40.png", "fct-1kb-cdf-load20.svg"} {
		if _, err := os.Stat(filepath.Join(outDir, name)); err != nil {
			t.Errorf("missing %s", name)
		}
	}
}

func TestBadMetaNamesFileAndLine(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, MetaFile), []byte("{\n  \"scheme\": \"x\",\n  \"load\": \"forty\"\n}\n"), 0o644)
	_, err := LoadTrial(dir)
	if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, MetaFile)) || !strings.Contains(err.Error(), "line 3") || !strings.Contains(err.Error(), `"load"`) {
		t.Fatalf("err = %v", err)
	}
	os.WriteFile(filepath.Join(dir, MetaFile), []byte(`{"scheme":"x"}`), 0o644)
	w, _ := transport.Create(dir, "h1")
	w.Flow(transport.Flow{ID: 1, Size: 1000, Bytes: 1000, StartNS: 1, EndNS: 2})
	w.Close()
	if _, err := LoadTrial(dir); err == nil || !strings.Contains(err.Error(), "bottleneck_bps") {
		t.Fatalf("missing bottleneck: err = %v", err)
	}
}

// Runs a rerun set aside are kept under set-aside/ and found by no report:
// only the trials below the run directory count, and a set-aside run
// given directly is still a trial to look at.
func TestFindTrialsSkipsSetAsideRuns(t *testing.T) {
	run := t.TempDir()
	kept := filepath.Join(run, "tcp", "trial-1")
	aside := filepath.Join(run, SetAsideDir, "tcp", "trial-1.1")
	for _, d := range []string{kept, aside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, MetaFile), []byte("{}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := FindTrials(run)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != kept {
		t.Errorf("FindTrials(run) = %v, want only %s", got, kept)
	}
	if got, err := FindTrials(aside); err != nil || len(got) != 1 || got[0] != aside {
		t.Errorf("FindTrials(set-aside trial) = %v, %v; want %s", got, err, aside)
	}
}

// The fidelity section names the hypervisor's share next to a trial when
// it is notable, faithful or not, and counts the flagged trials it ran
// under.
func TestFidelityNamesTheHypervisorsShare(t *testing.T) {
	trials := []*TrialSummary{
		{Scheme: "quiet", Trial: 1, Fidelity: Fidelity{CPUStealPct: 0.4}},
		{Scheme: "stolen", Trial: 1, Fidelity: Fidelity{CPUStealPct: 6.25}},
		{Scheme: "late", Trial: 1, Fidelity: Fidelity{CPUStealPct: 9.5, DelayLinesUnfaithful: true}},
		{Scheme: "late", Trial: 2, Fidelity: Fidelity{CPUStealPct: 1, DelayLinesUnfaithful: true}},
	}
	var b strings.Builder
	fidelitySection(&b, trials)
	md := b.String()
	for _, s := range []string{
		"- stolen, trial 1: ok; the hypervisor took 6.2 % of the CPU (steal)",
		"- late, trial 1: delay-lines; the hypervisor took 9.5 % of the CPU (steal)",
		"- late, trial 2: delay-lines\n",
		"2 trial(s) are flagged", "1 of them ran while the hypervisor took 2 % or more",
	} {
		if !strings.Contains(md, s) {
			t.Errorf("fidelity section lacks %q:\n%s", s, md)
		}
	}
	if strings.Contains(md, "- quiet,") {
		t.Errorf("a quiet, faithful trial is listed:\n%s", md)
	}
}

// The loader judges a trial's tail against the stretches the runner found
// the CPU saturated in (meta.json's fidelity): 1000 messages, the 12 that
// start in a 12 ms stall finishing together at its end, is a tail the
// machine made; the same stretch a second later is not.
func TestLoaderFlagsATailMadeWhileTheCPUWasSaturated(t *testing.T) {
	base := int64(1_800_000_000e9)
	write := func(spanFrom int64) *TrialSummary {
		dir := filepath.Join(t.TempDir(), "trial-1")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		w, err := transport.Create(dir, "h0")
		if err != nil {
			t.Fatal(err)
		}
		stallFrom, stallTo := base+500e6, base+512e6
		for i := range 1000 {
			start := base + int64(i)*1e6
			end := start + 200_000
			if start >= stallFrom && start < stallTo {
				end = stallTo + 200_000
			}
			w.Flow(transport.Flow{ID: uint64(i + 1), Pattern: "dynamic", Src: "h1", Dst: "h0", Size: 1000, Bytes: 1000,
				StartNS: start, EndNS: end, Class: "rpc"})
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		meta, _ := json.Marshal(map[string]any{"scheme": "s", "trial": 1, "bottleneck_bps": 1e9, "unloaded_rtt_ns": 300_000,
			"fidelity": map[string]any{"cpu_saturated_spans": []map[string]int64{{"start_ns": spanFrom, "end_ns": spanFrom + 12e6}}}})
		if err := os.WriteFile(filepath.Join(dir, MetaFile), meta, 0o644); err != nil {
			t.Fatal(err)
		}
		tr, err := LoadTrial(dir)
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	stalled := write(base + 500e6)
	if f := stalled.Fidelity; !f.CPUTailDistorted || f.Faithful() || f.Flags() != "cpu-tail" || len(f.CPUTail) != 2 {
		t.Fatalf("a tail made in the saturated stretch: %+v, flags %s", f, f.Flags())
	}
	var b strings.Builder
	fidelitySection(&b, []*TrialSummary{stalled})
	if md := b.String(); !strings.Contains(md, "- s, trial 1: cpu-tail; 11 of the 11 slowest 1 % of all messages were in flight while the CPU was saturated (13 of all 1000 were); 11 of the 11 slowest 1 % of rpc's messages were in flight while the CPU was saturated (13 of all 1000 were)") {
		t.Errorf("fidelity section:\n%s", md)
	}
	elsewhere := write(base + 1500e6)
	if f := elsewhere.Fidelity; f.CPUTailDistorted || !f.Faithful() {
		t.Fatalf("a saturated stretch away from the tail: %+v", f)
	}
}

// A trial's LMM summary with a probe tally gives the trial its probe
// latency and lost count; one without leaves both unset, so the report's
// probe columns stay empty rather than reading zero.
func TestLoadLMMReadsTheProbeTally(t *testing.T) {
	dir := t.TempDir()
	s := lmm.Summary{Name: "s0_eth0", US: stats.Summarize([]float64{10, 20, 30}),
		Probe: &lmm.ProbeSummary{Matched: 2, Lost: 1, US: stats.Summarize([]float64{4, 8})}}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "s0_eth0.summary.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	var tr TrialSummary
	if err := tr.loadLMM(dir); err != nil {
		t.Fatal(err)
	}
	if tr.ProbeLatencyUS == nil || tr.ProbeLatencyUS.Mean != 6 || tr.ProbesLost != 1 || tr.SwitchLatencyUS.Mean != 20 {
		t.Fatalf("probe %+v lost %d, every packet %+v: want the probes' mean 6 and 1 lost beside every packet's 20", tr.ProbeLatencyUS, tr.ProbesLost, tr.SwitchLatencyUS)
	}
	s.Probe = nil
	if b, err = json.Marshal(s); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "s0_eth0.summary.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	var none TrialSummary
	if err := none.loadLMM(dir); err != nil {
		t.Fatal(err)
	}
	if none.ProbeLatencyUS != nil || probesLost(&none) != "" {
		t.Fatalf("no probe stream, yet probe latency %+v and lost %q", none.ProbeLatencyUS, probesLost(&none))
	}
}
