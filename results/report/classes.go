package report

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/fabric-emu/fabric/hosts/transport"
	"github.com/fabric-emu/fabric/results/flows"
	"github.com/fabric-emu/fabric/results/stats"
)

// ClassResult is one traffic class's slowdowns in one trial: per size
// range (classRanges) and per SLO objective, all cut from the trial's one
// slowdown computation (flows.Analysis.Class).
type ClassResult struct {
	Name string  `json:"name"`
	DSCP uint8   `json:"dscp"`
	Load float64 `json:"load,omitempty"`
	// BDP is the trial's bandwidth-delay product in bytes, which bounds in
	// BDPs ("1bdp") were resolved with.
	BDP    int64               `json:"bdp"`
	Ranges []flows.BucketStats `json:"ranges"`
	SLO    []ObjectiveResult   `json:"slo,omitempty"`
}

// ObjectiveResult is one SLO objective and the slowdowns it bounds.
type ObjectiveResult struct {
	Objective Objective         `json:"objective"`
	Stats     flows.BucketStats `json:"stats"`
}

// classRanges are the size ranges every class's table shows: all its
// messages, those below one BDP (SWP §2.1's SLO range), and SizeBuckets.
func classRanges() []flows.Range {
	out := []flows.Range{{}, flows.BelowBDP}
	for _, b := range flows.SizeBuckets {
		out = append(out, flows.Range{Named: b.Name})
	}
	return out
}

// classResults cuts the trial's analysis by class: the classes meta.json
// names, in its order, then any other class the records carry.
func classResults(a *flows.Analysis, metas []ClassMeta) []ClassResult {
	metas = slices.Clone(metas)
	for _, name := range a.ClassNames() {
		if !slices.ContainsFunc(metas, func(m ClassMeta) bool { return m.Name == name }) {
			metas = append(metas, ClassMeta{Name: name})
		}
	}
	var out []ClassResult
	for _, m := range metas {
		c := ClassResult{Name: m.Name, DSCP: m.DSCP, Load: m.Load, BDP: a.Ideal.BDP()}
		for _, r := range classRanges() {
			c.Ranges = append(c.Ranges, a.Class(m.Name, r))
		}
		for _, o := range m.SLO {
			c.SLO = append(c.SLO, ObjectiveResult{Objective: o, Stats: a.Class(m.Name, o.Range)})
		}
		out = append(out, c)
	}
	return out
}

// ClassCell is one class's slowdowns in one row: per size range, the mean
// over the row's trials, and its SLO's verdicts.
type ClassCell struct {
	Name   string
	DSCP   uint8
	Ranges []SizeCell
	SLO    []SLOCell
}

// SLOCell is one objective of a class in one row: the mean over the
// trials of each trial's percentile, its 95 % confidence interval's
// half-width over the trials (NaN with fewer than two), and the verdict.
type SLOCell struct {
	Objective     Objective
	N             int // messages in the range, summed over the trials
	Trials        int // trials with messages in the range
	P50, P50CI    float64
	P99, P99CI    float64
	Ratio         float64 // the worst measured / target: ≤ 1 when the SLO holds
	CrossesTarget bool    // the confidence interval straddles a target
}

// Met reports whether the objective holds (on the trials' mean).
func (c SLOCell) Met() bool { return c.Ratio <= 1 }

// Verdict is "SLO met" or "missed by 1.32×", with a warning when the
// trials' confidence interval straddles the target, or "no messages".
func (c SLOCell) Verdict() string {
	var v string
	switch {
	case c.Trials == 0 || math.IsNaN(c.Ratio):
		return "no messages"
	case c.Met():
		v = "SLO met"
	default:
		v = fmt.Sprintf("missed by %.2f×", c.Ratio)
	}
	if c.CrossesTarget {
		v += " (the 95 % interval crosses the target)"
	}
	return v
}

// ClassVerdicts are the trials' classes with their SLOs judged as the
// report's SLO table judges them: what a capacity search asks of a probe.
func ClassVerdicts(trials []*TrialSummary) []ClassCell { return classesOf(trials) }

// classesOf aggregates the trials' classes, in the first trial's order.
func classesOf(trials []*TrialSummary) []ClassCell {
	var out []ClassCell
	for _, t := range trials {
		for _, c := range t.Classes {
			if !slices.ContainsFunc(out, func(x ClassCell) bool { return x.Name == c.Name }) {
				out = append(out, ClassCell{Name: c.Name, DSCP: c.DSCP})
			}
		}
	}
	for i := range out {
		per := make([]*ClassResult, len(trials))
		for k, t := range trials {
			for j := range t.Classes {
				if t.Classes[j].Name == out[i].Name {
					per[k] = &t.Classes[j]
				}
			}
		}
		out[i].Ranges = classRangeCells(per)
		out[i].SLO = sloCells(per)
	}
	return out
}

// classRangeCells averages one class's slowdowns per range over trials
// (nil where a trial lacks the class).
func classRangeCells(per []*ClassResult) []SizeCell {
	var out []SizeCell
	for k, r := range classRanges() {
		c := SizeCell{Bucket: r.Name()}
		var p50s, p99s []float64
		for _, cr := range per {
			if cr == nil || k >= len(cr.Ranges) || cr.Ranges[k].N == 0 {
				continue
			}
			c.N += cr.Ranges[k].N
			p50s = append(p50s, cr.Ranges[k].Slowdown.P50)
			p99s = append(p99s, cr.Ranges[k].Slowdown.P99)
		}
		c.P50, c.P99 = stats.Mean(p50s), stats.Mean(p99s)
		out = append(out, c)
	}
	return out
}

// sloCells evaluates one class's objectives over the row's trials.
func sloCells(per []*ClassResult) []SLOCell {
	var first *ClassResult
	for _, cr := range per {
		if cr != nil && len(cr.SLO) > 0 {
			first = cr
			break
		}
	}
	if first == nil {
		return nil
	}
	var out []SLOCell
	for k, o := range first.SLO {
		c := SLOCell{Objective: o.Objective}
		var p50s, p99s []float64
		for _, cr := range per {
			if cr == nil || k >= len(cr.SLO) || cr.SLO[k].Stats.N == 0 {
				continue
			}
			s := cr.SLO[k].Stats
			c.N += s.N
			c.Trials++
			p50s, p99s = append(p50s, s.Slowdown.P50), append(p99s, s.Slowdown.P99)
		}
		c.P50, c.P50CI = stats.MeanCI95(p50s)
		c.P99, c.P99CI = stats.MeanCI95(p99s)
		c.Ratio, c.CrossesTarget = judge(c)
		out = append(out, c)
	}
	return out
}

// judge is the worst ratio of measured to target over the objective's
// bounds, and whether a bound's confidence interval straddles its target.
func judge(c SLOCell) (ratio float64, crosses bool) {
	ratio = math.NaN()
	for _, b := range []struct{ target, v, ci float64 }{
		{c.Objective.P99Slowdown, c.P99, c.P99CI}, {c.Objective.P50Slowdown, c.P50, c.P50CI},
	} {
		if b.target <= 0 || math.IsNaN(b.v) {
			continue
		}
		if r := b.v / b.target; math.IsNaN(ratio) || r > ratio {
			ratio = r
		}
		if !math.IsNaN(b.ci) && b.v-b.ci <= b.target && b.target <= b.v+b.ci {
			crosses = true
		}
	}
	return ratio, crosses
}

// classTables writes, per class, its slowdown by size range, then every
// class's SLO verdicts.
func classTables(b *strings.Builder, sh shape, rows []Row) {
	names := classNames(rows)
	if len(names) == 0 {
		return
	}
	fmt.Fprintf(b, "\n## Traffic classes\n\nSlowdown per class and size range (mean over the row's trials of each trial's "+
		"percentile); <1bdp is the messages below one bandwidth-delay product, the bottleneck rate times the unloaded RTT "+
		"each trial measured (%s in the first trial).\n", bdpText(rows))
	for _, name := range names {
		var cols []column
		for i, r := range classRanges() {
			cols = append(cols,
				column{r.Name() + " p50", func(row Row) float64 { return classRange(row, name, i).P50 }, 2, false},
				column{r.Name() + " p99", func(row Row) float64 { return classRange(row, name, i).P99 }, 2, false})
		}
		cols = nonEmpty(rows, cols)
		if len(cols) == 0 {
			continue
		}
		fmt.Fprintf(b, "\n### Class %s (%s)\n\n", name, transport.DSCP(classDSCP(rows, name)))
		table(b, sh.keys, rows, cols)
	}
	sloTable(b, sh, rows, names)
}

// sloTable writes one line per row, class and objective.
func sloTable(b *strings.Builder, sh shape, rows []Row, names []string) {
	var lines []string
	for _, r := range rows {
		for _, name := range names {
			for _, c := range r.Class(name).SLO {
				line := "|"
				for _, v := range r.Keys {
					line += " " + v + " |"
				}
				lines = append(lines, fmt.Sprintf("%s %s | %d | %s | %s | %s | %s | %s |", line, r.Scheme, c.Trials, name,
					c.Objective, withCI(c.P99, c.P99CI), withCI(c.P50, c.P50CI), c.Verdict()))
			}
		}
	}
	if len(lines) == 0 {
		return
	}
	b.WriteString("\n### SLOs\n\nMet when the mean over the trials of each trial's percentile is within the target; ± is the " +
		"95 % confidence interval over the trials (Student's t), shown with two or more trials.\n\n|")
	for _, k := range sh.keys {
		b.WriteString(" " + k + " |")
	}
	b.WriteString(" scheme | trials | class | objective | p99 slowdown | p50 slowdown | verdict |\n|" +
		strings.Repeat("---|", len(sh.keys)+1) + "---:|---|---|---:|---:|---|\n")
	b.WriteString(strings.Join(lines, "\n") + "\n")
}

func withCI(v, ci float64) string {
	if math.IsNaN(ci) {
		return num(v, 2)
	}
	return num(v, 2) + " ± " + num(ci, 2)
}

// classNames are the classes of the rows, in order of first appearance.
func classNames(rows []Row) []string {
	var out []string
	for _, r := range rows {
		for _, c := range r.Classes {
			if !slices.Contains(out, c.Name) {
				out = append(out, c.Name)
			}
		}
	}
	return out
}

func classDSCP(rows []Row, name string) uint8 {
	for _, r := range rows {
		if c := r.Class(name); c.Name != "" {
			return c.DSCP
		}
	}
	return 0
}

// Class is the row's cell of the named class (the zero cell without it).
func (r Row) Class(name string) ClassCell {
	for _, c := range r.Classes {
		if c.Name == name {
			return c
		}
	}
	return ClassCell{}
}

// classRange is the row's class's i-th range, NaN when it has none.
func classRange(r Row, name string, i int) SizeCell {
	c := r.Class(name)
	if i >= len(c.Ranges) {
		return SizeCell{P50: math.NaN(), P99: math.NaN()}
	}
	return c.Ranges[i]
}

// bdpText is the first trial's BDP as the report states it.
func bdpText(rows []Row) string {
	for _, r := range rows {
		if r.classBDP > 0 {
			return sizeText(r.classBDP)
		}
	}
	return "unknown"
}
