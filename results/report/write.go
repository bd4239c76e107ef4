package report

import (
	"encoding/csv"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/fabric-emu/fabric/results/stats"
)

// Report is what Write produced.
type Report struct {
	Keys     []string // the sweep keys, a column each
	Rows     []Row
	Markdown string
	Files    []string  // report.md, summary.csv and the figures
	Failed   []Failure // the run's trials that did not complete
}

// Write writes report.md, summary.csv and the figures into dir and returns
// the report; its Markdown is what `fabric report` prints.
func Write(dir string, trials ...*TrialSummary) (*Report, error) {
	return WriteRun(dir, nil, trials...)
}

// WriteRun is Write for a run some of whose trials did not complete: the
// report ends with a Failed section that lists them.
func WriteRun(dir string, failed []Failure, trials ...*TrialSummary) (*Report, error) {
	if len(trials)+len(failed) == 0 {
		return nil, errNoTrials
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	keys := sweepKeys(trials)
	r := &Report{Keys: keys, Rows: aggregate(trials, keys), Failed: failed}
	figures, err := writeFigures(dir, trials, keys, r.Rows)
	if err != nil {
		return nil, err
	}
	csvPath := filepath.Join(dir, "summary.csv")
	if err := writeSummaryCSV(csvPath, trials); err != nil {
		return nil, err
	}
	r.Markdown = markdown(r.Rows, trials, figures, failed)
	mdPath := filepath.Join(dir, "report.md")
	if err := os.WriteFile(mdPath, []byte(r.Markdown), 0o644); err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	r.Files = append([]string{mdPath, csvPath}, figures...)
	return r, nil
}

// summaryColumns is summary.csv's header: one row per trial.
var summaryColumns = []string{
	"scheme", "load", "point", "trial",
	"lat_avg_us", "lat_p50_us", "lat_p90_us", "lat_p99_us", "lat_p999_us", "lat_max_us",
	"lmm_matched", "lmm_unmatched", "lmm_egress_only",
	"probe_avg_us", "probe_p99_us", "probes_lost",
	"fct_1kb_avg_us", "fct_1kb_p99_us", "fct_10mb_avg_us", "fct_10mb_p99_us",
	"slowdown_p50", "slowdown_p99",
	"qct_avg_us", "qct_p99_us",
	"tput_avg_mbps", "utilization", "jain",
	"capture_drops", "cpu_saturated", "incomplete_flows", "faithful", "dir",
}

// probesLost is a trial's count of probes the switch dropped, "" without
// a probe stream.
func probesLost(t *TrialSummary) string {
	if t.ProbeLatencyUS == nil {
		return ""
	}
	return strconv.FormatInt(t.ProbesLost, 10)
}

func writeSummaryCSV(path string, trials []*TrialSummary) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	w := csv.NewWriter(f)
	classHeader, classCells := classColumns(trials)
	w.Write(append(slices.Clone(summaryColumns), classHeader...))
	g := func(s *stats.Summary, pick func(stats.Summary) float64) string {
		if v, ok := field(s, pick); ok {
			return strconv.FormatFloat(v, 'g', 8, 64)
		}
		return ""
	}
	p999 := func(s stats.Summary) float64 { return s.P999 }
	mx := func(s stats.Summary) float64 { return s.Max }
	for _, t := range trials {
		var matched, unmatched, egressOnly string
		if t.LMM != nil {
			matched = strconv.FormatInt(t.LMM.Matched, 10)
			unmatched = strconv.FormatInt(t.LMM.Unmatched, 10)
			egressOnly = strconv.FormatInt(t.LMM.EgressOnly, 10)
		}
		var util, jain string
		if t.ThroughputMbp != nil {
			util = strconv.FormatFloat(t.Utilization, 'g', 6, 64)
			jain = strconv.FormatFloat(t.Jain, 'g', 6, 64)
		}
		w.Write(append([]string{
			t.Scheme, strconv.FormatFloat(t.Load, 'g', -1, 64), t.Point, strconv.Itoa(t.Trial),
			g(t.SwitchLatencyUS, mean), g(t.SwitchLatencyUS, p50), g(t.SwitchLatencyUS, p90), g(t.SwitchLatencyUS, p99),
			g(t.SwitchLatencyUS, p999), g(t.SwitchLatencyUS, mx),
			matched, unmatched, egressOnly,
			g(t.ProbeLatencyUS, mean), g(t.ProbeLatencyUS, p99), probesLost(t),
			g(t.FCT1KBUS, mean), g(t.FCT1KBUS, p99), g(t.FCT10MBUS, mean), g(t.FCT10MBUS, p99),
			g(t.SlowdownAll, p50), g(t.SlowdownAll, p99),
			g(t.QCTUS, mean), g(t.QCTUS, p99),
			g(t.ThroughputMbp, mean), util, jain,
			strconv.FormatUint(t.Fidelity.CaptureDrops, 10), strconv.FormatBool(t.Fidelity.CPUSaturated),
			strconv.Itoa(t.Fidelity.IncompleteFlows), strconv.FormatBool(t.Fidelity.Faithful()), t.Dir,
		}, classCells(t)...))
	}
	w.Flush()
	if err := errors.Join(w.Error(), f.Close()); err != nil {
		return fmt.Errorf("report: %s: %w", path, err)
	}
	return nil
}

// classColumns are summary.csv's per-class columns, after the fixed ones:
// for each class and SLO objective (numbered from 1 in the class's slo
// list), the trial's message count, median and p99 slowdown in the
// objective's range and whether the trial alone met it; and the cells of
// one trial (empty where the trial lacks the class).
func classColumns(trials []*TrialSummary) (header []string, cells func(*TrialSummary) []string) {
	type key struct {
		class string
		k     int
	}
	var keys []key
	for _, t := range trials {
		for _, c := range t.Classes {
			for k := range c.SLO {
				if !slices.Contains(keys, key{c.Name, k}) {
					keys = append(keys, key{c.Name, k})
				}
			}
		}
	}
	for _, k := range keys {
		p := fmt.Sprintf("%s_slo%d_", k.class, k.k+1)
		header = append(header, p+"n", p+"p50", p+"p99", p+"met")
	}
	return header, func(t *TrialSummary) []string {
		out := make([]string, 0, len(header))
		for _, k := range keys {
			i := slices.IndexFunc(t.Classes, func(c ClassResult) bool { return c.Name == k.class })
			if i < 0 || k.k >= len(t.Classes[i].SLO) || t.Classes[i].SLO[k.k].Stats.N == 0 {
				out = append(out, "", "", "", "")
				continue
			}
			o := t.Classes[i].SLO[k.k]
			ratio, _ := judge(SLOCell{Objective: o.Objective, P50: o.Stats.Slowdown.P50, P99: o.Stats.Slowdown.P99,
				P50CI: math.NaN(), P99CI: math.NaN()}) // the SLO table's verdict, on this trial alone
			met := ratio <= 1
			out = append(out, strconv.Itoa(o.Stats.N), strconv.FormatFloat(o.Stats.Slowdown.P50, 'g', 6, 64),
				strconv.FormatFloat(o.Stats.Slowdown.P99, 'g', 6, 64), strconv.FormatBool(met))
		}
		return out
	}
}
