package report

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"

	"github.com/fabric-emu/fabric/results/plot"
	"github.com/fabric-emu/fabric/results/stats"
)

// writeFigures draws latency against load, and per set of sweep values
// the slowdown spectrum, the switch latency, 1KB FCT and QCT CDFs
// overlaid per scheme (each scheme's lowest-numbered trial), throughput
// time series and the sorted per-flow throughput.
func writeFigures(dir string, trials []*TrialSummary, keys []string, rows []Row) ([]string, error) {
	f := &figures{dir: dir, shape: shapeOf(trials, keys)}
	if err := f.latencyVsLoad(rows); err != nil {
		return f.files, err
	}
	if err := f.sloVsLoad(rows); err != nil {
		return f.files, err
	}
	for _, g := range keyGroups(trials, keys) {
		for _, draw := range []func(keyGroup) error{f.spectrum, f.cdfs, f.throughput, f.sortedThroughput, f.cpu} {
			if err := draw(g); err != nil {
				return f.files, err
			}
		}
	}
	return f.files, nil
}

// figures collects the files the report's figures were written to.
type figures struct {
	dir   string
	shape shape
	files []string
}

func (f *figures) add(base string, err error) error {
	if err != nil {
		return err
	}
	f.files = append(f.files, base+".png", base+".svg")
	return nil
}

// keyGroup is, for one set of sweep values, each scheme's lowest-numbered
// trial, and the names its figures get.
type keyGroup struct {
	suffix, title string
	first         []*TrialSummary
}

func keyGroups(trials []*TrialSummary, keys []string) []keyGroup {
	var out []keyGroup
	index := map[string]int{}
	for _, g := range groups(trials, keys) {
		id := strings.Join(g.keys, "\x00")
		i, ok := index[id]
		if !ok {
			kg := keyGroup{}
			var parts, titles []string
			for k, v := range g.keys {
				parts = append(parts, slug(keys[k]+v))
				titles = append(titles, keys[k]+" "+v)
			}
			if len(parts) > 0 {
				kg.suffix = "-" + strings.Join(parts, "-")
				kg.title = ", " + strings.Join(titles, ", ")
			}
			i = len(out)
			index[id] = i
			out = append(out, kg)
		}
		out[i].first = append(out[i].first, g.trials[0])
	}
	return out
}

func slug(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '%' {
			return -1
		}
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.' {
			return r
		}
		return '_'
	}, s)
}

// latencyVsLoad draws one line per scheme of mean switch latency against
// offered load, when the run has at least two loads.
func (f *figures) latencyVsLoad(rows []Row) error {
	var series []plot.Series
	var loads []float64
	lo, hi := math.Inf(1), 0.0
	for _, r := range rows {
		if math.IsNaN(r.LatAvg) || r.Load == 0 {
			continue
		}
		if !slices.Contains(loads, r.Load) {
			loads = append(loads, r.Load)
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
	if len(loads) < 2 {
		return nil
	}
	base := filepath.Join(f.dir, "latency-vs-load")
	fig := plot.Figure{Title: "Mean switch latency against load", XLabel: "offered load (%)",
		YLabel: "mean switch latency (µs)", LogY: lo > 0 && hi/lo > 20}
	return f.add(base, plot.Lines(base, fig, series, true))
}

// sloVsLoad draws, for each class and SLO objective, the slowdown the
// objective bounds against load, a line per scheme and the target as a
// dotted-line series (SWP's Fig. 1 form), when the run has two loads.
func (f *figures) sloVsLoad(rows []Row) error {
	for _, name := range classNames(rows) {
		for k := 0; ; k++ {
			series, obj, ok := sloSeries(rows, name, k)
			if !ok {
				break
			}
			if len(series) == 0 || len(series[0].X) < 2 {
				continue
			}
			target := obj.P99Slowdown
			pct := "99th-percentile"
			if target == 0 {
				target, pct = obj.P50Slowdown, "median"
			}
			first := series[0].X
			series = append(series, plot.Series{Label: fmt.Sprintf("SLO %g×", target),
				X: []float64{first[0], first[len(first)-1]}, Y: []float64{target, target}})
			base := filepath.Join(f.dir, fmt.Sprintf("slo-%s-%d", slug(name), k+1))
			fig := plot.Figure{Title: "Class " + name + ": " + obj.String(), XLabel: "load (%)",
				YLabel: pct + " slowdown (" + obj.Name() + ")"}
			if err := f.add(base, plot.Lines(base, fig, series, true)); err != nil {
				return err
			}
		}
	}
	return nil
}

// sloSeries is, for the class's k-th objective, a series per scheme of the
// bounded percentile against load; ok is false past the last objective.
func sloSeries(rows []Row, name string, k int) (series []plot.Series, obj Objective, ok bool) {
	for _, r := range rows {
		c := r.Class(name)
		if k >= len(c.SLO) || r.Load == 0 {
			continue
		}
		ok, obj = true, c.SLO[k].Objective
		v := c.SLO[k].P99
		if obj.P99Slowdown == 0 {
			v = c.SLO[k].P50
		}
		if math.IsNaN(v) {
			continue
		}
		i := slices.IndexFunc(series, func(s plot.Series) bool { return s.Label == r.Scheme })
		if i < 0 {
			series = append(series, plot.Series{Label: r.Scheme})
			i = len(series) - 1
		}
		series[i].X = append(series[i].X, r.Load*100)
		series[i].Y = append(series[i].Y, v)
	}
	return series, obj, ok
}

// spectrum draws each scheme's 99th-percentile and median slowdown
// against the flows' rank by size (Homa's slowdown spectrum).
func (f *figures) spectrum(g keyGroup) error {
	if !f.shape.wants("dynamic") {
		return nil
	}
	var with []*TrialSummary
	for _, t := range g.first {
		if len(t.Spectrum) > 0 {
			with = append(with, t)
		}
	}
	if len(with) == 0 {
		return nil
	}
	for _, pct := range []struct{ name, label string }{{"p99", "99th-percentile"}, {"p50", "median"}} {
		var ss []plot.Series
		for _, t := range with {
			s := plot.Series{Label: t.scheme()}
			for _, b := range t.Spectrum {
				s.X = append(s.X, (b.Hi+b.Lo)/2*100)
				if pct.name == "p99" {
					s.Y = append(s.Y, b.P99)
				} else {
					s.Y = append(s.Y, b.P50)
				}
			}
			ss = append(ss, s)
		}
		base := filepath.Join(f.dir, "slowdown-spectrum-"+pct.name+g.suffix)
		fig := plot.Figure{Title: "Slowdown spectrum" + g.title, XLabel: "flows ranked by size, shortest first (% of count)",
			YLabel: pct.label + " slowdown", LogY: true}
		if err := f.add(base, plot.Lines(base, fig, ss, true)); err != nil {
			return err
		}
	}
	return nil
}

// cdfKinds are the distributions drawn as CDFs, one figure per kind and
// set of sweep values with a curve per scheme; all are times in µs.
var cdfKinds = []struct {
	name, title, xlabel string
	pts                 func(*TrialSummary) []stats.Point
}{
	{"switch-latency-cdf", "Switch latency", "switch latency", func(t *TrialSummary) []stats.Point { return t.LatencyCDF }},
	{"fct-1kb-cdf", "1KB flow completion time", "FCT", func(t *TrialSummary) []stats.Point { return t.FCT1KBCDF }},
	{"qct-cdf", "Incast query completion time", "QCT", func(t *TrialSummary) []stats.Point { return t.QCTCDF }},
}

func (f *figures) cdfs(g keyGroup) error {
	for _, k := range cdfKinds {
		var curves []plot.Curve
		lo, hi := math.Inf(1), 0.0
		for _, t := range g.first {
			if p := k.pts(t); len(p) > 0 {
				curves = append(curves, plot.Curve{Label: t.scheme(), Points: p})
				lo, hi = min(lo, p[0].Value), max(hi, p[len(p)-1].Value)
			}
		}
		if len(curves) == 0 {
			continue
		}
		base := filepath.Join(f.dir, k.name+g.suffix)
		fig := plot.Figure{Title: k.title + g.title, XLabel: k.xlabel, XTimeUS: true, LogX: plot.WantsLogX(lo, hi)}
		if err := f.add(base, plot.CDF(base, fig, curves)); err != nil {
			return err
		}
	}
	return nil
}

// throughput draws each scheme's sampled throughput over time, at most
// eight lines a figure: more are unreadable.
func (f *figures) throughput(g keyGroup) error {
	for _, t := range g.first {
		if len(t.Throughput) == 0 {
			continue
		}
		var ss []plot.Series
		for _, ts := range t.Throughput[:min(8, len(t.Throughput))] {
			ss = append(ss, plot.Series{Label: ts.Label, X: ts.Seconds, Y: ts.Mbps})
		}
		title := "Throughput, " + t.scheme() + g.title
		if len(t.Throughput) > 8 {
			title += fmt.Sprintf(" (8 of %d flows)", len(t.Throughput))
		}
		base := filepath.Join(f.dir, "throughput-"+slug(t.scheme())+g.suffix)
		fig := plot.Figure{Title: title, XLabel: "time (s)", YLabel: "throughput (Mbit/s)"}
		if err := f.add(base, plot.Lines(base, fig, ss, false)); err != nil {
			return err
		}
	}
	return nil
}

// sortedThroughput draws every flow's throughput, lowest first, a line per
// scheme (NDP's Fig. 14 form), when there are more than two flows.
func (f *figures) sortedThroughput(g keyGroup) error {
	var ss []plot.Series
	for _, t := range g.first {
		if len(t.PerFlowMbps) <= 2 {
			continue
		}
		s := plot.Series{Label: t.scheme()}
		for i, v := range t.PerFlowMbps {
			s.X = append(s.X, float64(i+1))
			s.Y = append(s.Y, v)
		}
		ss = append(ss, s)
	}
	if len(ss) == 0 {
		return nil
	}
	base := filepath.Join(f.dir, "throughput-sorted"+g.suffix)
	fig := plot.Figure{Title: "Per-flow throughput, sorted" + g.title, XLabel: "flow (rank by throughput)", YLabel: "throughput (Mbit/s)"}
	return f.add(base, plot.Lines(base, fig, ss, true))
}
