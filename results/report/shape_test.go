package report

import (
	"math"
	"strings"
	"testing"

	"github.com/fabric-emu/fabric/results/flows"
	"github.com/fabric-emu/fabric/results/stats"
)

// summary is a stats.Summary of n samples centred on v.
func summary(v float64) *stats.Summary {
	return &stats.Summary{N: 100, Mean: v, P50: v, P90: 1.5 * v, P99: 2 * v, Max: 3 * v}
}

func trialOf(scheme, pattern string, trial int, sweep ...SweepValue) *TrialSummary {
	label := scheme
	for _, v := range sweep {
		label += " " + v.Key + "=" + v.Value
	}
	return &TrialSummary{Scheme: label, SchemeName: scheme, Pattern: pattern, Sweep: sweep, Trial: trial}
}

// tableHeader returns the header line of the table under the section
// titled title, or "" when the report has no such section.
func tableHeader(md, title string) string {
	_, rest, ok := strings.Cut(md, "## "+title+"\n")
	if !ok {
		return ""
	}
	for _, line := range strings.Split(rest, "\n") {
		if strings.HasPrefix(line, "|") {
			return line
		}
	}
	return ""
}

// Each pattern gets its own tables, sweep keys get columns, columns with
// no data and sections of other patterns are left out.
func TestReportFollowsTheExperiment(t *testing.T) {
	cases := []struct {
		name     string
		trials   []*TrialSummary
		want     map[string]string // section title → its table's header
		absent   []string          // strings the report must not contain
		keysWant []string
	}{{
		name: "incast swept over senders and size",
		trials: func() []*TrialSummary {
			var out []*TrialSummary
			for _, s := range []string{"cubic", "dctcp"} {
				for _, n := range []string{"4", "16", "8"} {
					tr := trialOf(s, "incast", 1, SweepValue{"senders", n}, SweepValue{"size", "64KB"})
					tr.QCTUS = summary(1000)
					out = append(out, tr)
				}
			}
			return out
		}(),
		want: map[string]string{"Incast query completion time": "| senders | size | scheme | trials | QCT avg (µs) | QCT median (µs) | QCT 99th (µs) | fidelity |"},
		absent: []string{"## Switch latency", "## Long-lived flow throughput", "## Flow slowdown", "1KB FCT", "| load |",
			"cubic senders="},
		keysWant: []string{"senders", "size"},
	}, {
		name: "permutation",
		trials: func() []*TrialSummary {
			var out []*TrialSummary
			for _, s := range []string{"cubic", "ndp"} {
				tr := trialOf(s, "permutation", 1)
				tr.ThroughputMbp, tr.Utilization, tr.Jain = summary(60), 0.6, 0.9
				out = append(out, tr)
			}
			return out
		}(),
		want:   map[string]string{"Long-lived flow throughput": "| scheme | trials | utilization | Jain's index | per-flow min (Mbit/s) | median (Mbit/s) | mean (Mbit/s) | fidelity |"},
		absent: []string{"## Incast", "## Flow slowdown", "## Switch latency"},
	}, {
		name: "static with the LMM, a HULL paper",
		trials: func() []*TrialSummary {
			var out []*TrialSummary
			for _, s := range []string{"tcp", "dctcp"} {
				tr := trialOf(s, "static", 1)
				tr.Paper = "hull-table1"
				tr.SwitchLatencyUS, tr.ThroughputMbp, tr.Utilization, tr.Jain = summary(150), summary(47), 0.95, 1
				out = append(out, tr)
			}
			return out
		}(),
		want: map[string]string{
			"Switch latency and flow completion (HULL Table 4's shape)": "| scheme | trials | switch latency avg (µs) | 90th (µs) | 99th (µs) | fidelity |",
			"Long-lived flow throughput":                                "| scheme | trials | utilization | Jain's index | per-flow min (Mbit/s) | median (Mbit/s) | mean (Mbit/s) | fidelity |",
		},
		absent: []string{"1KB FCT", "10MB FCT", "## Incast"},
	}, {
		name: "dynamic swept over workload and load",
		trials: func() []*TrialSummary {
			var out []*TrialSummary
			for _, w := range []string{"w2", "w4"} {
				for _, l := range []string{"80%", "50%"} {
					tr := trialOf("homa", "dynamic", 1, SweepValue{"workload", w}, SweepValue{"load", l})
					tr.SlowdownAll = summary(1.5)
					tr.SizeSlowdown = []flows.BucketStats{{Bucket: "<10KB", N: 100, Slowdown: *summary(1.2)}}
					out = append(out, tr)
				}
			}
			return out
		}(),
		want:     map[string]string{"Flow slowdown by size": "| workload | load | scheme | trials | all p50 | all p99 | <10KB p50 | <10KB p99 | fidelity |"},
		absent:   []string{"## Incast", "## Long-lived", "10-100KB", "## Switch latency"},
		keysWant: []string{"workload", "load"},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rep, err := Write(t.TempDir(), c.trials...)
			if err != nil {
				t.Fatal(err)
			}
			md := rep.Markdown
			for title, header := range c.want {
				if got := tableHeader(md, title); got != header {
					t.Errorf("section %q: header\n%s\nwant\n%s\nreport:\n%s", title, got, header, md)
				}
			}
			for _, s := range c.absent {
				if strings.Contains(md, s) {
					t.Errorf("report has %q:\n%s", s, md)
				}
			}
			if strings.Join(rep.Keys, ",") != strings.Join(c.keysWant, ",") {
				t.Errorf("keys %v, want %v", rep.Keys, c.keysWant)
			}
			for _, r := range rep.Rows {
				if math.IsNaN(r.SlowP50) && math.IsNaN(r.QCTAvg) && math.IsNaN(r.Utilization) {
					t.Errorf("row %s %v has none of its pattern's data", r.Scheme, r.Keys)
				}
			}
		})
	}
}

// Rows follow the sweep values by value ("8" before "16"), schemes in
// order of appearance within.
func TestRowsInSweepOrder(t *testing.T) {
	var trials []*TrialSummary
	for _, n := range []string{"16", "4", "8"} {
		for _, s := range []string{"b", "a"} {
			tr := trialOf(s, "incast", 1, SweepValue{"senders", n})
			tr.QCTUS = summary(1)
			trials = append(trials, tr)
		}
	}
	rows := aggregate(trials, sweepKeys(trials))
	var got []string
	for _, r := range rows {
		got = append(got, r.Keys[0]+r.Scheme)
	}
	if want := "4b,4a,8b,8a,16b,16a"; strings.Join(got, ",") != want {
		t.Fatalf("rows %v, want %s", got, want)
	}
}
