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
	"strings"

	"fabric/results/plot"
	"fabric/results/stats"
)

// Row is one (scheme, load) cell group of the table: the mean over its
// trials of each per-trial statistic, as HULL's Table 4 averages 10 trials.
// NaN means no trial measured it.
type Row struct {
	Scheme  string
	Load    float64
	Trials  int
	Unfaith int // trials flagged unfaithful

	LatAvg, LatP90, LatP99 float64 // switch latency, µs
	FCT1KBAvg, FCT1KBP99   float64 // µs
	FCT10MBAvg             float64 // ms
	QCTAvg, QCTP99         float64 // µs
	TputMbps, TputFraction float64
}

// Report is what Write produced.
type Report struct {
	Rows     []Row
	Markdown string
	Files    []string // report.md, summary.csv and the figures
}

// Write writes report.md, summary.csv and the figures into dir and returns
// the report; its Markdown is what `fabric report` prints.
func Write(dir string, trials ...*TrialSummary) (*Report, error) {
	if len(trials) == 0 {
		return nil, errors.New("report: no trials")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	r := &Report{Rows: aggregate(trials)}
	figures, err := writeFigures(dir, trials, r.Rows)
	if err != nil {
		return nil, err
	}
	csvPath := filepath.Join(dir, "summary.csv")
	if err := writeSummaryCSV(csvPath, trials); err != nil {
		return nil, err
	}
	r.Markdown = markdown(r.Rows, trials, figures)
	mdPath := filepath.Join(dir, "report.md")
	if err := os.WriteFile(mdPath, []byte(r.Markdown), 0o644); err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	r.Files = append([]string{mdPath, csvPath}, figures...)
	return r, nil
}

// group is the trials of one (scheme, load).
type group struct {
	scheme string
	load   float64
	trials []*TrialSummary
}

// groups orders loads ascending and schemes in order of first appearance,
// which is the runner's (and the paper's) order.
func groups(trials []*TrialSummary) []group {
	var schemes []string
	var loads []float64
	for _, t := range trials {
		if !slices.Contains(schemes, t.Scheme) {
			schemes = append(schemes, t.Scheme)
		}
		if !slices.Contains(loads, t.Load) {
			loads = append(loads, t.Load)
		}
	}
	slices.Sort(loads)
	var out []group
	for _, l := range loads {
		for _, s := range schemes {
			g := group{scheme: s, load: l}
			for _, t := range trials {
				if t.Scheme == s && t.Load == l {
					g.trials = append(g.trials, t)
				}
			}
			if len(g.trials) > 0 {
				slices.SortFunc(g.trials, func(a, b *TrialSummary) int { return a.Trial - b.Trial })
				out = append(out, g)
			}
		}
	}
	return out
}

// meanOf averages f over the trials where it is measured.
func meanOf(ts []*TrialSummary, f func(*TrialSummary) (float64, bool)) float64 {
	var sum float64
	n := 0
	for _, t := range ts {
		if v, ok := f(t); ok && !math.IsNaN(v) {
			sum += v
			n++
		}
	}
	if n == 0 {
		return math.NaN()
	}
	return sum / float64(n)
}

func field(s *stats.Summary, pick func(stats.Summary) float64) (float64, bool) {
	if s == nil || s.N == 0 {
		return 0, false
	}
	return pick(*s), true
}

func aggregate(trials []*TrialSummary) []Row {
	var rows []Row
	for _, g := range groups(trials) {
		r := Row{Scheme: g.scheme, Load: g.load, Trials: len(g.trials)}
		for _, t := range g.trials {
			if !t.Fidelity.Faithful() {
				r.Unfaith++
			}
		}
		stat := func(get func(*TrialSummary) *stats.Summary, pick func(stats.Summary) float64) float64 {
			return meanOf(g.trials, func(t *TrialSummary) (float64, bool) { return field(get(t), pick) })
		}
		lat := func(t *TrialSummary) *stats.Summary { return t.SwitchLatencyUS }
		k1 := func(t *TrialSummary) *stats.Summary { return t.FCT1KBUS }
		m10 := func(t *TrialSummary) *stats.Summary { return t.FCT10MBUS }
		qct := func(t *TrialSummary) *stats.Summary { return t.QCTUS }
		tp := func(t *TrialSummary) *stats.Summary { return t.ThroughputMbp }
		mean := func(s stats.Summary) float64 { return s.Mean }
		r.LatAvg = stat(lat, mean)
		r.LatP90 = stat(lat, func(s stats.Summary) float64 { return s.P90 })
		r.LatP99 = stat(lat, func(s stats.Summary) float64 { return s.P99 })
		r.FCT1KBAvg = stat(k1, mean)
		r.FCT1KBP99 = stat(k1, func(s stats.Summary) float64 { return s.P99 })
		r.FCT10MBAvg = stat(m10, mean) / 1e3
		r.QCTAvg = stat(qct, mean)
		r.QCTP99 = stat(qct, func(s stats.Summary) float64 { return s.P99 })
		r.TputMbps = stat(tp, mean)
		r.TputFraction = meanOf(g.trials, func(t *TrialSummary) (float64, bool) {
			return t.ThroughputFraction, t.ThroughputMbp != nil
		})
		rows = append(rows, r)
	}
	return rows
}

func num(v float64, prec int) string {
	if math.IsNaN(v) {
		return "–"
	}
	return strconv.FormatFloat(v, 'f', prec, 64)
}

func loadText(l float64) string {
	if l == 0 {
		return "–"
	}
	return strconv.FormatFloat(l*100, 'f', -1, 64) + "%"
}

// markdown renders the Table 4 shape, with the best scheme per load and
// column in bold (HULL marks it in red).
func markdown(rows []Row, trials []*TrialSummary, figures []string) string {
	var b strings.Builder
	b.WriteString("# fabric report\n\n")
	b.WriteString("Switch latency and flow completion times per scheme and load, in the shape of HULL Table 4. " +
		"Each cell is the mean over the trials of that trial's statistic (HULL averaged 10 trials); percentiles are exact " +
		"(nearest rank) over each trial's full sample. Switch latency is the LMM's per-packet measurement from captures " +
		"at the switch's ports. The best scheme per load and column is in **bold**.\n\n")
	cols := []column{
		{"switch latency avg (µs)", func(r Row) float64 { return r.LatAvg }, 1, false},
		{"90th (µs)", func(r Row) float64 { return r.LatP90 }, 1, false},
		{"99th (µs)", func(r Row) float64 { return r.LatP99 }, 1, false},
		{"1KB FCT avg (µs)", func(r Row) float64 { return r.FCT1KBAvg }, 0, false},
		{"1KB FCT 99th (µs)", func(r Row) float64 { return r.FCT1KBP99 }, 0, false},
		{"10MB FCT avg (ms)", func(r Row) float64 { return r.FCT10MBAvg }, 1, false},
	}
	table(&b, rows, cols)
	if slices.ContainsFunc(rows, func(r Row) bool { return !math.IsNaN(r.QCTAvg) }) {
		b.WriteString("\n## Incast query completion time\n\n")
		table(&b, rows, []column{
			{"QCT avg (µs)", func(r Row) float64 { return r.QCTAvg }, 0, false},
			{"QCT 99th (µs)", func(r Row) float64 { return r.QCTP99 }, 0, false},
		})
	}
	if slices.ContainsFunc(rows, func(r Row) bool { return !math.IsNaN(r.TputMbps) }) {
		b.WriteString("\n## Long-lived flow throughput\n\n")
		b.WriteString("Per-flow mean throughput, and the aggregate as a fraction of the ideal (every flow alone at the bottleneck rate).\n\n")
		table(&b, rows, []column{
			{"per-flow throughput avg (Mbit/s)", func(r Row) float64 { return r.TputMbps }, 1, true},
			{"fraction of ideal", func(r Row) float64 { return r.TputFraction }, 3, true},
		})
	}
	b.WriteString("\n## Fidelity\n\n")
	bad := 0
	for _, t := range trials {
		f := t.Fidelity
		if f.Faithful() && len(f.Notes) == 0 && f.IncompleteFlows == 0 && f.LMMUnmatched == 0 {
			continue
		}
		if !f.Faithful() {
			bad++
		}
		fmt.Fprintf(&b, "- %s, load %s, trial %d: %s", t.Scheme, loadText(t.Load), t.Trial, f.Flags())
		if f.LMMUnmatched > 0 {
			fmt.Fprintf(&b, "; %d packets dropped in the switch (LMM unmatched)", f.LMMUnmatched)
		}
		if f.IncompleteFlows > 0 {
			fmt.Fprintf(&b, "; %d incomplete flows left out of FCTs", f.IncompleteFlows)
		}
		for _, n := range f.Notes {
			b.WriteString("; " + n)
		}
		b.WriteString("\n")
	}
	if bad == 0 {
		b.WriteString("All trials faithful: no capture drops, CPU not saturated.\n")
	} else {
		fmt.Fprintf(&b, "\n%d trial(s) are flagged and should not be believed. Lower the offered load or the emulated link rate "+
			"(e.g. 100 Mbit instead of 1 Gbit), capture fewer ports or use a probe-only capture filter, and rerun.\n", bad)
	}
	if len(figures) > 0 {
		b.WriteString("\n## Figures\n\n")
		for _, f := range figures {
			if strings.HasSuffix(f, ".png") {
				name := filepath.Base(f)
				fmt.Fprintf(&b, "- [%s](%s)\n", strings.TrimSuffix(name, ".png"), name)
			}
		}
	}
	return b.String()
}

// column is one statistic of a table.
type column struct {
	name         string
	get          func(Row) float64
	prec         int
	higherBetter bool // throughput; latencies and FCTs are better lower
}

func table(b *strings.Builder, rows []Row, cols []column) {
	b.WriteString("| load | scheme | trials |")
	sep := "|---|---|---:|"
	for _, c := range cols {
		b.WriteString(" " + c.name + " |")
		sep += "---:|"
	}
	b.WriteString(" fidelity |\n" + sep + "---|\n")
	// best[load][col] is the best value at that load.
	best := map[float64][]float64{}
	for _, r := range rows {
		if best[r.Load] == nil {
			best[r.Load] = make([]float64, len(cols))
			for i, c := range cols {
				best[r.Load][i] = math.Inf(1)
				if c.higherBetter {
					best[r.Load][i] = math.Inf(-1)
				}
			}
		}
		for i, c := range cols {
			v := c.get(r)
			if !math.IsNaN(v) && (c.higherBetter && v > best[r.Load][i] || !c.higherBetter && v < best[r.Load][i]) {
				best[r.Load][i] = v
			}
		}
	}
	for _, r := range rows {
		fmt.Fprintf(b, "| %s | %s | %d |", loadText(r.Load), r.Scheme, r.Trials)
		for i, c := range cols {
			v := c.get(r)
			cell := num(v, c.prec)
			if !math.IsNaN(v) && v == best[r.Load][i] && countAtLoad(rows, r.Load) > 1 {
				cell = "**" + cell + "**"
			}
			b.WriteString(" " + cell + " |")
		}
		flag := "ok"
		if r.Unfaith > 0 {
			flag = fmt.Sprintf("%d of %d unfaithful", r.Unfaith, r.Trials)
		}
		b.WriteString(" " + flag + " |\n")
	}
}

func countAtLoad(rows []Row, load float64) int {
	n := 0
	for _, r := range rows {
		if r.Load == load {
			n++
		}
	}
	return n
}

// summaryColumns is summary.csv's header: one row per trial.
var summaryColumns = []string{
	"scheme", "load", "point", "trial",
	"lat_avg_us", "lat_p50_us", "lat_p90_us", "lat_p99_us", "lat_p999_us", "lat_max_us",
	"lmm_matched", "lmm_unmatched", "lmm_egress_only",
	"fct_1kb_avg_us", "fct_1kb_p99_us", "fct_10mb_avg_us", "fct_10mb_p99_us",
	"slowdown_p50", "slowdown_p99",
	"qct_avg_us", "qct_p99_us",
	"tput_avg_mbps", "tput_fraction",
	"capture_drops", "cpu_saturated", "incomplete_flows", "faithful", "dir",
}

func writeSummaryCSV(path string, trials []*TrialSummary) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	w := csv.NewWriter(f)
	w.Write(summaryColumns)
	g := func(s *stats.Summary, pick func(stats.Summary) float64) string {
		if v, ok := field(s, pick); ok {
			return strconv.FormatFloat(v, 'g', 8, 64)
		}
		return ""
	}
	mean := func(s stats.Summary) float64 { return s.Mean }
	p50 := func(s stats.Summary) float64 { return s.P50 }
	p90 := func(s stats.Summary) float64 { return s.P90 }
	p99 := func(s stats.Summary) float64 { return s.P99 }
	p999 := func(s stats.Summary) float64 { return s.P999 }
	mx := func(s stats.Summary) float64 { return s.Max }
	for _, t := range trials {
		var matched, unmatched, egressOnly string
		if t.LMM != nil {
			matched = strconv.FormatInt(t.LMM.Matched, 10)
			unmatched = strconv.FormatInt(t.LMM.Unmatched, 10)
			egressOnly = strconv.FormatInt(t.LMM.EgressOnly, 10)
		}
		tf := ""
		if t.ThroughputMbp != nil {
			tf = strconv.FormatFloat(t.ThroughputFraction, 'g', 6, 64)
		}
		w.Write([]string{
			t.Scheme, strconv.FormatFloat(t.Load, 'g', -1, 64), t.Point, strconv.Itoa(t.Trial),
			g(t.SwitchLatencyUS, mean), g(t.SwitchLatencyUS, p50), g(t.SwitchLatencyUS, p90), g(t.SwitchLatencyUS, p99),
			g(t.SwitchLatencyUS, p999), g(t.SwitchLatencyUS, mx),
			matched, unmatched, egressOnly,
			g(t.FCT1KBUS, mean), g(t.FCT1KBUS, p99), g(t.FCT10MBUS, mean), g(t.FCT10MBUS, p99),
			g(t.SlowdownAll, p50), g(t.SlowdownAll, p99),
			g(t.QCTUS, mean), g(t.QCTUS, p99),
			g(t.ThroughputMbp, mean), tf,
			strconv.FormatUint(t.Fidelity.CaptureDrops, 10), strconv.FormatBool(t.Fidelity.CPUSaturated),
			strconv.Itoa(t.Fidelity.IncompleteFlows), strconv.FormatBool(t.Fidelity.Faithful()), t.Dir,
		})
	}
	w.Flush()
	if err := errors.Join(w.Error(), f.Close()); err != nil {
		return fmt.Errorf("report: %s: %w", path, err)
	}
	return nil
}

// writeFigures draws latency against load, and per load the switch
// latency, 1KB FCT and QCT CDFs overlaid per scheme (each scheme's
// lowest-numbered trial), and throughput time series.
func writeFigures(dir string, trials []*TrialSummary, rows []Row) ([]string, error) {
	var files []string
	add := func(base string, err error) error {
		if err != nil {
			return err
		}
		files = append(files, base+".png", base+".svg")
		return nil
	}
	// Latency against load: one line per scheme.
	var series []plot.Series
	lo, hi := math.Inf(1), 0.0
	for _, r := range rows {
		if math.IsNaN(r.LatAvg) || r.Load == 0 {
			continue
		}
		i := slices.IndexFunc(series, func(s plot.Series) bool { return s.Label == r.Scheme })
		if i < 0 {
			series = append(series, plot.Series{Label: r.Scheme})
			i = len(series) - 1
		}
		series[i].X = append(series[i].X, r.Load*100)
		series[i].Y = append(series[i].Y, r.LatAvg)
		lo, hi = min(lo, r.LatAvg), max(hi, r.LatAvg)
	}
	if len(series) > 0 {
		base := filepath.Join(dir, "latency-vs-load")
		fig := plot.Figure{Title: "Mean switch latency against load", XLabel: "offered load (%)",
			YLabel: "mean switch latency (µs)", LogY: lo > 0 && hi/lo > 20}
		if err := add(base, plot.Lines(base, fig, series, true)); err != nil {
			return files, err
		}
	}
	for _, g := range groupsByLoad(trials) {
		suffix := ""
		title := ""
		if g.load > 0 {
			suffix = fmt.Sprintf("-load%g", g.load*100)
			title = ", load " + loadText(g.load)
		}
		for _, k := range []struct {
			name, title, xlabel string
			pts                 func(*TrialSummary) []stats.Point
		}{
			{"switch-latency-cdf", "Switch latency", "switch latency (µs)", func(t *TrialSummary) []stats.Point { return t.LatencyCDF }},
			{"fct-1kb-cdf", "1KB flow completion time", "FCT (µs)", func(t *TrialSummary) []stats.Point { return t.FCT1KBCDF }},
			{"qct-cdf", "Incast query completion time", "QCT (µs)", func(t *TrialSummary) []stats.Point { return t.QCTCDF }},
		} {
			var curves []plot.Curve
			for _, t := range g.first {
				if p := k.pts(t); len(p) > 0 {
					curves = append(curves, plot.Curve{Label: t.Scheme, Points: p})
				}
			}
			if len(curves) == 0 {
				continue
			}
			lo, hi := math.Inf(1), 0.0
			for _, c := range curves {
				lo, hi = min(lo, c.Points[0].Value), max(hi, c.Points[len(c.Points)-1].Value)
			}
			base := filepath.Join(dir, k.name+suffix)
			fig := plot.Figure{Title: k.title + title, XLabel: k.xlabel, LogX: plot.WantsLogX(lo, hi)}
			if err := add(base, plot.CDF(base, fig, curves)); err != nil {
				return files, err
			}
		}
		for _, t := range g.first {
			if len(t.Throughput) == 0 {
				continue
			}
			var ss []plot.Series
			for i, ts := range t.Throughput {
				if i == 8 { // more lines than this are unreadable
					break
				}
				ss = append(ss, plot.Series{Label: ts.Label, X: ts.Seconds, Y: ts.Mbps})
			}
			base := filepath.Join(dir, "throughput-"+slug(t.Scheme)+suffix)
			fig := plot.Figure{Title: "Throughput, " + t.Scheme + title, XLabel: "time (s)", YLabel: "throughput (Mbit/s)"}
			if err := add(base, plot.Lines(base, fig, ss, false)); err != nil {
				return files, err
			}
		}
	}
	return files, nil
}

// loadGroup is, for one load, each scheme's lowest-numbered trial.
type loadGroup struct {
	load  float64
	first []*TrialSummary
}

func groupsByLoad(trials []*TrialSummary) []loadGroup {
	var out []loadGroup
	for _, g := range groups(trials) {
		if len(out) == 0 || out[len(out)-1].load != g.load {
			out = append(out, loadGroup{load: g.load})
		}
		out[len(out)-1].first = append(out[len(out)-1].first, g.trials[0])
	}
	return out
}

func slug(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.' {
			return r
		}
		return '_'
	}, s)
}
