package report

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fabric-emu/fabric/hosts/transport"
	"github.com/fabric-emu/fabric/results/flows"
)

// classTrial writes a trial of two classes the way a run leaves it: each
// class's messages below one BDP (1 KB) all at slowdown small[class], its
// messages above (200 KB) at slowdown 10, and meta.json with the classes'
// SLOs. The lab: 10 Mbit/s and a 100 ms RTT, so one BDP is 125 KB.
func classTrial(t *testing.T, root, scheme string, load, trial int, small map[string]float64) {
	t.Helper()
	dir := filepath.Join(root, fmt.Sprintf("%s_load%d", scheme, load), fmt.Sprintf("trial-%d", trial))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ideal := flows.Ideal{BottleneckBPS: 10e6, RTT: 100 * time.Millisecond}
	w, err := transport.Create(dir, "h0")
	if err != nil {
		t.Fatal(err)
	}
	id, s0 := uint64(0), int64(1_800_000_000e9)
	for _, class := range []string{"fg", "bg"} {
		for i := range 100 {
			size, sd := int64(1000), small[class]
			if i%10 == 9 {
				size, sd = 200_000, 10
			}
			id++
			start := s0 + int64(id)*1e6
			fct := time.Duration(sd * float64(ideal.FCT(size)))
			w.Flow(transport.Flow{ID: id, Pattern: "dynamic", Src: "h1", Dst: "h0", Size: size, Bytes: size,
				StartNS: start, EndNS: start + int64(fct), Class: class, DSCP: map[string]uint8{"fg": 56}[class]})
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	meta, _ := json.Marshal(map[string]any{
		"scheme": scheme + " ", "scheme_name": scheme, "pattern": "dynamic", "trial": trial, "load": float64(load) / 100,
		"sweep": []SweepValue{{"load", fmt.Sprintf("%d%%", load)}}, "bottleneck_bps": ideal.BottleneckBPS, "unloaded_rtt_ns": ideal.RTT.Nanoseconds(),
		"classes": []ClassMeta{
			{Name: "fg", DSCP: 56, Load: 0.1, SLO: SLO{{P99Slowdown: 2.5, Range: flows.BelowBDP}}},
			{Name: "bg", Load: 0.8, SLO: SLO{{P99Slowdown: 5}}},
		},
	})
	if err := os.WriteFile(filepath.Join(dir, MetaFile), meta, 0o644); err != nil {
		t.Fatal(err)
	}
}

// The report has a table per traffic class (slowdown per size range and
// below one BDP) and the SLO verdicts with a confidence interval over the
// trials, all from the records' classes and meta.json's SLOs.
func TestClassReport(t *testing.T) {
	root := t.TempDir()
	for trial, fg := range []float64{3.0, 3.4} { // FIFO: the foreground misses 2.5 by 3.2/2.5 = 1.28×
		classTrial(t, root, "fifo", 80, trial+1, map[string]float64{"fg": fg, "bg": 2})
	}
	for trial, fg := range []float64{1.2, 1.4} { // strict priority: met; the background pays
		classTrial(t, root, "prio", 80, trial+1, map[string]float64{"fg": fg, "bg": 6})
	}
	trials, err := LoadRuns(root)
	if err != nil {
		t.Fatal(err)
	}
	if c := trials[0].Classes; len(c) != 2 || c[0].Name != "fg" || c[0].BDP != 125_000 {
		t.Fatalf("classes %+v, want fg then bg with a 125 KB BDP", c)
	}
	rep, err := Write(t.TempDir(), trials...)
	if err != nil {
		t.Fatal(err)
	}
	md := rep.Markdown
	want := "| load | scheme | trials | all p50 | all p99 | <1bdp p50 | <1bdp p99 | <10KB p50 | <10KB p99 | 100KB-10MB p50 | 100KB-10MB p99 | fidelity |"
	for _, class := range []string{"fg (CS7)", "bg (CS0)"} {
		if got := tableHeader(md, "Class "+class); got != want {
			t.Errorf("class %s: header\n%s\nwant\n%s\nreport:\n%s", class, got, want, md)
		}
	}
	for _, line := range []string{
		// 3.0 and 3.4: mean 3.2, s = 0.283, t(1) = 12.706: ± 2.54.
		"| 80% | fifo | 2 | fg | p99 ≤ 2.5 (<1bdp) | 3.20 ± 2.54 | 3.20 ± 2.54 | missed by 1.28× (the 95 % interval crosses the target) |",
		"| 80% | prio | 2 | fg | p99 ≤ 2.5 (<1bdp) | 1.30 ± 1.27 | 1.30 ± 1.27 | SLO met (the 95 % interval crosses the target) |",
		// every bg message counts: 90 at 6 and 10 at 10, so the p99 is 10.
		"| 80% | prio | 2 | bg | p99 ≤ 5 (all) | 10.00 ± 0.00 | 6.00 ± 0.00 | missed by 2.00× |",
		"| 80% | fifo | 2 | bg | p99 ≤ 5 (all) | 10.00 ± 0.00 | 2.00 ± 0.00 | missed by 2.00× |",
	} {
		if !strings.Contains(md, line) {
			t.Errorf("report lacks\n%s\nreport:\n%s", line, md)
		}
	}
	// Below one BDP leaves the 200 KB messages out: the fg's <1bdp p99
	// is its small messages' slowdown, not 10.
	for _, r := range rep.Rows {
		fg := r.Class("fg")
		if r.Scheme == "fifo" && (fg.Ranges[1].P99 < 3.19 || fg.Ranges[1].P99 > 3.21 || fg.SLO[0].Met()) {
			t.Errorf("fifo fg: <1bdp p99 %v, met %v; want 3.2, missed", fg.Ranges[1].P99, fg.SLO[0].Met())
		}
		if r.Scheme == "prio" && !fg.SLO[0].Met() {
			t.Errorf("prio fg: SLO not met at p99 %v", fg.SLO[0].P99)
		}
	}
	// With a second load, each class's SLO is drawn against load.
	root2 := t.TempDir()
	for _, load := range []int{40, 80} {
		classTrial(t, root2, "fifo", load, 1, map[string]float64{"fg": 2, "bg": 2})
	}
	two, err := Generate(root2)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"slo-fg-1.png", "slo-bg-1.svg"} {
		if !slices.Contains(two.Files, filepath.Join(root2, f)) {
			t.Errorf("no figure %s in %v", f, two.Files)
		}
	}
	// One trial: no interval.
	one, err := Write(t.TempDir(), trials[0])
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(one.Markdown, "| 80% | fifo | 1 | fg | p99 ≤ 2.5 (<1bdp) | 3.00 | 3.00 | missed by 1.20× |") {
		t.Errorf("one trial's SLO line wrong:\n%s", one.Markdown)
	}
}

// summary.csv carries each class's SLO objectives per trial, after the
// fixed columns: messages, median and p99 slowdown, and the trial's own
// verdict.
func TestSummaryCSVHasClassColumns(t *testing.T) {
	root := t.TempDir()
	classTrial(t, root, "fifo", 80, 1, map[string]float64{"fg": 3.0, "bg": 2})
	classTrial(t, root, "prio", 80, 1, map[string]float64{"fg": 1.2, "bg": 6})
	trials, err := LoadRuns(root)
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	if _, err := Write(out, trials...); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(out, "summary.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	head := rows[0]
	if want := []string{"fg_slo1_n", "fg_slo1_p50", "fg_slo1_p99", "fg_slo1_met", "bg_slo1_n", "bg_slo1_p50", "bg_slo1_p99", "bg_slo1_met"}; !slices.Equal(head[len(summaryColumns):], want) {
		t.Fatalf("class columns %v, want %v", head[len(summaryColumns):], want)
	}
	got := map[string][]string{}
	for _, r := range rows[1:] {
		got[strings.TrimSpace(r[0])] = r[len(summaryColumns):]
	}
	// fg below one BDP: its 90 small messages; bg: all 100, p99 10.
	for scheme, want := range map[string][]string{
		"fifo": {"90", "3", "3", "false", "100", "2", "10", "false"},
		"prio": {"90", "1.2", "1.2", "true", "100", "6", "10", "false"},
	} {
		if !slices.Equal(got[scheme], want) {
			t.Errorf("%s: class cells %v, want %v", scheme, got[scheme], want)
		}
	}
}
