// Package paper holds the published numbers fabric's built-in scenarios
// reproduce, and puts a run's measured table next to them.
//
// Absolute microseconds cannot match the HULL NetFPGA testbed (1 Gbit/s
// hardware; fabric's scenarios run at 100 Mbit/s on 2 cores), so the
// comparison is about what should carry over: the ratio of each scheme to
// the baseline, and the ordering of the schemes, checked row by row.
package paper

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/fabric-emu/fabric/results/report"
)

// Table is a published table: a value per (row, scheme), lower is better.
type Table struct {
	ID       string
	Title    string
	Source   string   // where the numbers are printed
	Metric   string   // what the values are
	Schemes  []string // fabric scheme names, in the paper's column order
	Labels   []string // the paper's column names
	Rows     []Row
	Baseline string // scheme ratios are taken against
	// measured picks the fabric value for a (row, scheme) from report rows.
	measured func(rows []report.Row, r Row, scheme string) float64
	// Claims are the paper's stated bounds, for papers that print their
	// results as figures (no Rows then).
	Claims func() []Claim
}

// Row is one row of a published table.
type Row struct {
	Label  string    // "20%", "mean", "99th"
	Load   float64   // the load the row is for (0: none)
	Values []float64 // per scheme, in Table.Schemes order
}

// hullLatency is the metric of HULL's latency tables. HULL's LMM timed a
// 1500-byte ping every 1 ms across the port (§5.2), which samples the
// queue at fixed times; fabric's probe stream does the same, and a run
// without one falls back to the mean over every packet, which weights
// busy moments by their packets and reads higher at low load.
const hullLatency = "switch latency (µs) of the probe stream (1500 B every 1 ms, HULL §5.2), or of every packet in a run without one"

// probeOr is the probe stream's statistic, or every packet's when the
// run had no probe stream.
func probeOr(probe, every float64) float64 {
	if math.IsNaN(probe) {
		return every
	}
	return probe
}

// Tables are the papers' published results, by the name an experiment's
// paper: field gives.
var Tables = map[string]*Table{
	// HULL Table 1 (two long-lived flows into one receiver, 1 Gbit/s):
	// switch latency of TCP against DCTCP with K = 30 KB.
	"hull-table1": {
		ID: "hull-table1", Title: "HULL Table 1: two long-lived flows",
		Source:  "Alizadeh et al., Less is More (NSDI 2012), Table 1",
		Metric:  hullLatency,
		Schemes: []string{"tcp-droptail", "dctcp-30k"}, Labels: []string{"TCP", "DCTCP-30K"},
		Baseline: "tcp-droptail",
		Rows: []Row{
			{Label: "mean", Values: []float64{1100.6, 153.9}},
			{Label: "99th", Values: []float64{4308.8, 305.8}},
		},
		measured: func(rows []report.Row, r Row, scheme string) float64 {
			for _, x := range rows {
				if x.Scheme == scheme {
					if r.Label == "mean" {
						return probeOr(x.ProbeAvg, x.LatAvg)
					}
					return probeOr(x.ProbeP99, x.LatP99)
				}
			}
			return math.NaN()
		},
	},
	// HULL Table 5 (two-priority QoS against the PQ at 40% load, large
	// and small buffer). fabric's LMM measures every packet through the
	// port; the paper's QoS switch latency is that of the high-priority
	// queue only, so compare the FCT rows rather than the latency row.
	"hull-table5": {
		ID: "hull-table5", Title: "HULL Table 5: two-priority QoS against the PQ (40% load)",
		Source:  "Alizadeh et al., Less is More (NSDI 2012), Table 5",
		Metric:  "switch latency avg (µs), 1KB FCT avg (µs), 10MB FCT avg (ms)",
		Schemes: []string{"tcp-qos", "pq950"}, Labels: []string{"TCP-QoS", "DCTCP-PQ950-Pacer"},
		Baseline: "tcp-qos",
		Rows: []Row{
			{Label: "large buffer: switch latency avg", Values: []float64{6.4, 6.9}},
			{Label: "large buffer: 1KB FCT avg", Values: []float64{565, 381}},
			{Label: "large buffer: 10MB FCT avg", Values: []float64{152.6, 199.0}},
			{Label: "small buffer: switch latency avg", Values: []float64{5.3, 5.0}},
			{Label: "small buffer: 1KB FCT avg", Values: []float64{371, 378}},
			{Label: "small buffer: 10MB FCT avg", Values: []float64{362.3, 199.4}},
		},
		measured: func(rows []report.Row, r Row, scheme string) float64 {
			buffer, metric, _ := strings.Cut(r.Label, ": ")
			name := scheme + "-" + strings.TrimSuffix(buffer, " buffer")
			for _, x := range rows {
				if x.Scheme != name {
					continue
				}
				switch metric {
				case "switch latency avg":
					return x.LatAvg
				case "1KB FCT avg":
					return x.FCT1KBAvg
				default:
					return x.FCT10MBAvg
				}
			}
			return math.NaN()
		},
	},
	// HULL Table 4 (dynamic flows: 80% 1 KB, 20% 10 MB, open-loop Poisson;
	// average switch latency).
	"hull-table4": {
		ID: "hull-table4", Title: "HULL Table 4: dynamic flows, average switch latency",
		Source:  "Alizadeh et al., Less is More (NSDI 2012), Table 4",
		Metric:  "mean " + hullLatency,
		Schemes: []string{"tcp-droptail", "dctcp-30k", "dctcp-6k-pacer", "dctcp-pq950-pacer"},
		Labels:  []string{"TCP-DropTail", "DCTCP-30K", "DCTCP-6K-Pacer", "DCTCP-PQ950-Pacer"},
		Rows: []Row{
			{Label: "20%", Load: 0.2, Values: []float64{111.5, 38.4, 6.6, 2.8}},
			{Label: "40%", Load: 0.4, Values: []float64{329.3, 78.3, 15.1, 7.0}},
			{Label: "60%", Load: 0.6, Values: []float64{720.5, 119.1, 24.8, 13.5}},
		},
		Baseline: "tcp-droptail",
		measured: func(rows []report.Row, r Row, scheme string) float64 {
			for _, x := range rows {
				if x.Scheme == scheme && math.Abs(x.Load-r.Load) < 1e-9 {
					return probeOr(x.ProbeAvg, x.LatAvg)
				}
			}
			return math.NaN()
		},
	},
}

func init() {
	Tables["homa-slowdown"] = &Table{ID: "homa-slowdown", Title: "Homa: slowdown of the shortest messages at 80% load",
		Source: thesis + ", §6.1, Fig. 6.1", Metric: "99th-percentile slowdown", Claims: homaSlowdownClaims}
	Tables["homa-priorities"] = &Table{ID: "homa-priorities", Title: "Homa: unscheduled priority levels",
		Source: thesis + ", Fig. 4.9 and 6.7", Metric: "99th-percentile slowdown", Claims: homaPriorityClaims}
	Tables["homa-pacer"] = &Table{ID: "homa-pacer", Title: "Homa: the sender's pacer",
		Source: thesis + ", Fig. 6.5", Metric: "99th-percentile slowdown", Claims: homaPacerClaims}
}

// IDs lists the published tables, sorted.
func IDs() []string {
	var ids []string
	for id := range Tables {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// Comparison is a published table next to a run's measurements.
type Comparison struct {
	Table *Table
	Rows  []CompRow
	// Scale is the run's time-scale factor s (the paper's rate over the
	// lab's): fabric's times divided by it are at the paper's scale. 0 or
	// 1: the run was not scaled. PaperUnits says the run's report gives
	// the paper's units already (it was written at the paper's scale and
	// divided each trial's times by its own s), so Scale is 1.
	Scale      float64
	PaperUnits bool
	// Slowdown is HULL Fig. 10 for Table 4 runs: the PQ's 10 MB FCT over
	// the best scheme's, per load, next to the paper's and eq. 3's.
	Slowdown []SlowdownRow
	// Claims are the table's claims checked against the run.
	Claims []ClaimResult
}

// SlowdownRow is one load of the Fig. 10 comparison.
type SlowdownRow struct {
	Load     float64
	Paper    float64 // the paper's measured 10 MB FCT slowdown of PQ950 (Table 4 text)
	Theory   float64 // (1-ρ)/(γ-ρ), γ = 0.95 less 8% for DCTCP's rate fluctuation
	Measured float64 // PQ 10 MB FCT / best 10 MB FCT at this load; NaN if unmeasured
	// Carried is the load the run's port carried at this row (NaN: not
	// known) and CarriedTheory eq. 3 at it: the theory for the load the
	// trials drew rather than the one they asked for.
	Carried, CarriedTheory float64
}

// HULL §6.2: "with the PQ, the average 10MB FCT is 17% longer at 20% load,
// 31% longer at 40% load, and 55% longer at 60% load" than the best scheme.
var pqSlowdown = map[float64]float64{0.2: 1.17, 0.4: 1.31, 0.6: 1.55}

// effectiveGamma is the PQ's drain fraction less ~8% for DCTCP's rate
// fluctuation, as HULL Fig. 10 compares eq. 3 with measurement (§6.1: 870
// of 950 Mbit/s).
const effectiveGamma = 0.95 * 0.92

// Slowdown is HULL eq. 3: the slowdown of a throughput-limited flow at load
// rho when the link is held to gamma of its rate.
func Slowdown(rho, gamma float64) float64 { return (1 - rho) / (gamma - rho) }

// CompRow is one published row with the measured values and the verdict.
type CompRow struct {
	Row
	Measured []float64 // NaN: not measured in this run
	// Pass says whether the measured schemes rank in the paper's order
	// (only the schemes measured in this row are compared).
	Pass     bool
	Compared int // schemes that had a measurement
	// Carried is the load the run's port carried at this row's load, the
	// mean over its schemes (NaN: the row has no load, or none known).
	Carried float64
}

// Compare matches report rows against the published table id; scale is the
// run's time-scale factor (0 when unscaled).
func Compare(id string, rows []report.Row, scale float64) (*Comparison, error) {
	t, ok := Tables[id]
	if !ok {
		return nil, fmt.Errorf("paper: no published table %q", id)
	}
	c := &Comparison{Table: t, Scale: scale}
	if t.Claims != nil {
		for _, cl := range t.Claims() {
			c.Claims = append(c.Claims, cl.check(rows))
		}
	}
	for _, r := range t.Rows {
		cr := CompRow{Row: r, Carried: carriedAt(rows, r.Load)}
		for _, s := range t.Schemes {
			cr.Measured = append(cr.Measured, t.measured(rows, r, s))
		}
		cr.Pass, cr.Compared = sameOrder(r.Values, cr.Measured)
		if cr.Compared > 0 {
			c.Rows = append(c.Rows, cr)
		}
	}
	if id == "hull-table4" {
		c.Slowdown = slowdowns(rows)
	}
	return c, nil
}

// slowdowns computes the Fig. 10 comparison for every load measured.
func slowdowns(rows []report.Row) []SlowdownRow {
	var out []SlowdownRow
	for _, load := range []float64{0.2, 0.4, 0.6} {
		pq, best := math.NaN(), math.Inf(1)
		seen := false
		for _, r := range rows {
			if math.Abs(r.Load-load) > 1e-9 || math.IsNaN(r.FCT10MBAvg) {
				continue
			}
			seen = true
			best = min(best, r.FCT10MBAvg)
			if r.Scheme == "dctcp-pq950-pacer" {
				pq = r.FCT10MBAvg
			}
		}
		if !seen {
			continue
		}
		carried := carriedAt(rows, load)
		out = append(out, SlowdownRow{Load: load, Paper: pqSlowdown[load], Theory: Slowdown(load, effectiveGamma), Measured: pq / best,
			Carried: carried, CarriedTheory: Slowdown(carried, effectiveGamma)})
	}
	return out
}

// carriedAt is the mean over the report rows at load of the load their
// port carried; NaN when load is 0 or no row knows it.
func carriedAt(rows []report.Row, load float64) float64 {
	sum, n := 0.0, 0
	for _, r := range rows {
		if load > 0 && math.Abs(r.Load-load) < 1e-9 && r.Carried > 0 { // NaN or 0: not known
			sum += r.Carried
			n++
		}
	}
	if n == 0 {
		return math.NaN()
	}
	return sum / float64(n)
}

// pct renders a fraction as a whole percentage, or "–".
func pct(v float64) string {
	if math.IsNaN(v) {
		return "–"
	}
	return strconv.FormatFloat(v*100, 'f', 0, 64) + "%"
}

// sameOrder reports whether the measured values (ignoring NaN) are ordered
// as the paper's: every pair the paper ranks strictly keeps its order.
func sameOrder(paper, measured []float64) (bool, int) {
	var idx []int
	for i, v := range measured {
		if !math.IsNaN(v) {
			idx = append(idx, i)
		}
	}
	if len(idx) < 2 {
		return false, len(idx)
	}
	for a := 0; a < len(idx); a++ {
		for b := a + 1; b < len(idx); b++ {
			i, j := idx[a], idx[b]
			if (paper[i] < paper[j]) != (measured[i] < measured[j]) {
				return false, len(idx)
			}
		}
	}
	return true, len(idx)
}

// Passed counts rows whose ordering agrees, and claims met among those
// measured.
func (c *Comparison) Passed() (pass, total int) {
	for _, r := range c.Claims {
		if !math.IsNaN(r.Value) {
			total++
			if r.Pass {
				pass++
			}
		}
	}
	for _, r := range c.Rows {
		if r.Compared >= 2 {
			total++
			if r.Pass {
				pass++
			}
		}
	}
	return pass, total
}

func num(v float64) string {
	if math.IsNaN(v) {
		return "–"
	}
	if v >= 100 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}

func ratio(v, base float64) string {
	if math.IsNaN(v) || math.IsNaN(base) || base == 0 {
		return "–"
	}
	return strconv.FormatFloat(v/base, 'f', 2, 64)
}

// order names the schemes from lowest to highest value.
func order(labels []string, values []float64) string {
	type kv struct {
		l string
		v float64
	}
	var xs []kv
	for i, v := range values {
		if !math.IsNaN(v) {
			xs = append(xs, kv{labels[i], v})
		}
	}
	sort.SliceStable(xs, func(a, b int) bool { return xs[a].v < xs[b].v })
	var out []string
	for _, x := range xs {
		out = append(out, x.l)
	}
	return strings.Join(out, " < ")
}

// Markdown renders the side-by-side table: per row and scheme the paper's
// and fabric's values and their ratios to the baseline, and the ordering
// verdict per row.
func (c *Comparison) Markdown() string {
	t := c.Table
	title := report.Heading(2, "Paper side by side: "+t.Title)
	if t.Claims != nil {
		return report.Blocks(title, fmt.Sprintf("Source: %s. Metric: %s (dimensionless: no scaling).", t.Source, t.Metric),
			claimsTable(c.Claims).Markdown())
	}
	s := c.Scale
	if s <= 0 {
		s = 1
	}
	intro := fmt.Sprintf("Source: %s. Metric: %s. Cells are paper / fabric at the paper's scale (fabric's measurement divided by the "+
		"run's time-scale factor s = %g; raw in brackets); the ratio is to %s in the same row.", t.Source, t.Metric, s, t.Baseline)
	if c.PaperUnits {
		intro = fmt.Sprintf("Source: %s. Metric: %s. Cells are paper / fabric, fabric's in the paper's units (each trial's times divided "+
			"by the s it ran at); the ratio is to %s in the same row.", t.Source, t.Metric, t.Baseline)
	}
	if c.carried() {
		intro += " " + carriedNote
	}
	var orders []string
	for _, r := range c.Rows {
		orders = append(orders, fmt.Sprintf("%s: paper %s; fabric %s", r.Label, order(t.Labels, r.Values), order(t.Labels, r.Measured)))
	}
	p, n := c.Passed()
	blocks := []string{title, intro, c.sideBySide(s).Markdown(), "Ordering per row (lowest first):", report.List(orders),
		fmt.Sprintf("Ordering agrees in %d of %d rows.", p, n)}
	if len(c.Slowdown) > 0 {
		slow := report.Table{Header: []string{"load", "paper", "eq. 3", "fabric", "carried", "eq. 3 at carried"},
			Right: []bool{false, true, true, true, true, true}}
		for _, r := range c.Slowdown {
			slow.Rows = append(slow.Rows, []string{fmt.Sprintf("%g%%", r.Load*100), fmt.Sprintf("%.2f", r.Paper),
				fmt.Sprintf("%.2f", r.Theory), ratio(r.Measured, 1), pct(r.Carried), ratio(r.CarriedTheory, 1)})
		}
		blocks = append(blocks, report.Heading(3, "10 MB FCT slowdown of DCTCP-PQ950-Pacer (HULL eq. 3, Fig. 10)"),
			"PQ's average 10 MB FCT over the best scheme's at the same load. Theory: (1−ρ)/(γ−ρ) with γ = 0.95 less 8% "+
				"for DCTCP's rate fluctuation, as in Fig. 10, at the load asked for and at the load the port carried.", slow.Markdown())
	}
	return report.Blocks(blocks...)
}

// carriedNote says what the carried column is.
const carriedNote = "The carried column is the share of the port's rate that its traffic carried, the mean over the row's trials: " +
	"the load the row measured at. Open-loop arrivals of a few large messages carry a load that varies from trial to trial; " +
	"compare a row with the paper's at the load it carried."

// carried says whether any row knows the load its port carried.
func (c *Comparison) carried() bool {
	return slices.ContainsFunc(c.Rows, func(r CompRow) bool { return !math.IsNaN(r.Carried) })
}

// sideBySide is the table of paper and fabric values, fabric's divided
// by the time-scale factor s, with the load each row carried when known.
func (c *Comparison) sideBySide(s float64) report.Table {
	t := c.Table
	base := slices.Index(t.Schemes, t.Baseline)
	tab := report.Table{Header: []string{"row"}, Right: []bool{false}}
	carried := c.carried()
	if carried {
		tab.Header, tab.Right = append(tab.Header, "carried"), append(tab.Right, true)
	}
	for _, l := range t.Labels {
		tab.Header = append(tab.Header, l+" paper / fabric", "ratio paper / fabric")
		tab.Right = append(tab.Right, true, true)
	}
	tab.Header = append(tab.Header, "ordering")
	for _, r := range c.Rows {
		row := []string{r.Label}
		if carried {
			row = append(row, pct(r.Carried))
		}
		for i := range t.Schemes {
			raw := " (" + num(r.Measured[i]) + ")"
			if c.PaperUnits {
				raw = ""
			}
			row = append(row, fmt.Sprintf("%s / %s%s", num(r.Values[i]), num(r.Measured[i]/s), raw),
				fmt.Sprintf("%s / %s", ratio(r.Values[i], r.Values[base]), ratio(r.Measured[i], r.Measured[base])))
		}
		verdict := "FAIL"
		switch {
		case r.Compared < 2:
			verdict = "n/a"
		case r.Pass:
			verdict = "PASS"
		}
		tab.Rows = append(tab.Rows, append(row, verdict))
	}
	return tab
}
