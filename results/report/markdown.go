package report

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/fabric-emu/fabric/internal/cpustat"
)

// What the report shows follows the experiment: its pattern (dynamic:
// flow completion and slowdown by size; incast: query completion;
// static and permutation: throughput), its sweep keys (a column each),
// its paper (HULL's Table 4 shape only for the HULL scenarios), and what
// was measured (switch latency when the LMM ran). Columns no row has a
// value in are left out. Trials from runs that recorded no pattern get
// every section they have data for.

// shape is what one report shows.
type shape struct {
	keys    []string
	hull    bool // HULL's Table 4 shape
	pattern string
}

func shapeOf(trials []*TrialSummary, keys []string) shape {
	s := shape{keys: keys}
	for _, t := range trials {
		s.hull = s.hull || strings.HasPrefix(t.Paper, "hull-")
		if s.pattern == "" {
			s.pattern = t.Pattern
		}
	}
	return s
}

// wants reports whether the section for pattern applies: the experiment's
// pattern is one of patterns, or the run recorded none.
func (s shape) wants(patterns ...string) bool {
	return s.pattern == "" || slices.Contains(patterns, s.pattern)
}

// markdown renders the report.
func markdown(rows []Row, trials []*TrialSummary, figures []string, failed []Failure) string {
	keys := sweepKeys(trials)
	sh := shapeOf(trials, keys)
	var b strings.Builder
	b.WriteString("# fabric report\n\n")
	if len(trials) == 0 {
		b.WriteString("No trial completed.\n")
		failedSection(&b, failed)
		return b.String()
	}
	b.WriteString("Each cell is the mean over the row's trials of that trial's statistic; percentiles are exact " +
		"(nearest rank) over each trial's full sample. The best scheme at each set of sweep values is in **bold**.\n")
	if sh.hull {
		hullTable(&b, sh, rows)
	} else {
		latencyTable(&b, sh, rows)
	}
	if sh.wants("dynamic") {
		slowdownTables(&b, sh, rows)
		classTables(&b, sh, rows)
		spectrumTables(&b, sh, rows)
	}
	if sh.wants("incast") {
		section(&b, sh, rows, "Incast query completion time",
			"A query completes when its last response has arrived.",
			[]column{
				{"QCT avg (µs)", func(r Row) float64 { return r.QCTAvg }, 0, false},
				{"QCT median (µs)", func(r Row) float64 { return r.QCTP50 }, 0, false},
				{"QCT 99th (µs)", func(r Row) float64 { return r.QCTP99 }, 0, false},
			})
	}
	if sh.pattern == "priority" {
		priorityTable(&b, sh, rows)
	}
	if sh.wants("static", "permutation") {
		section(&b, sh, rows, "Long-lived flow throughput",
			"Utilization: the flows' throughput together over what their receivers' links can take. "+
				"Jain's fairness index of the per-flow throughputs: 1 when all are equal.",
			[]column{
				{"utilization", func(r Row) float64 { return r.Utilization }, 3, true},
				{"Jain's index", func(r Row) float64 { return r.Jain }, 3, true},
				{"per-flow min (Mbit/s)", func(r Row) float64 { return r.TputMin }, 1, true},
				{"median (Mbit/s)", func(r Row) float64 { return r.TputMedian }, 1, true},
				{"mean (Mbit/s)", func(r Row) float64 { return r.TputMbps }, 1, true},
			})
	}
	metricsTable(&b, sh, rows)
	cpuSection(&b, sh, trials)
	planSection(&b, trials)
	fidelitySection(&b, trials)
	machinesSection(&b, trials)
	failedSection(&b, failed)
	figureList(&b, figures)
	return b.String()
}

// priorityTable is NDP Fig. 10's shape: the short flow's completion time
// (its round's query completion time), and how much longer it took than
// when it ran alone: the same scheme's row with no long flows.
func priorityTable(b *strings.Builder, sh shape, rows []Row) {
	idle := map[string]float64{}
	for _, r := range rows {
		if r.Value("senders") == "0" {
			idle[r.Scheme] = r.QCTP50
		}
	}
	overIdle := func(r Row) float64 {
		if v, ok := idle[r.Scheme]; ok {
			return r.QCTP50 - v
		}
		return math.NaN()
	}
	section(b, sh, rows, "Short flow completion time",
		"Each round one short flow and senders long flows start at once towards one receiver; senders = 0 is the short flow alone "+
			"(its idle completion time). Over idle: the median here less the same scheme's median at senders = 0.",
		[]column{
			{"FCT median (µs)", func(r Row) float64 { return r.QCTP50 }, 0, false},
			{"FCT avg (µs)", func(r Row) float64 { return r.QCTAvg }, 0, false},
			{"FCT 99th (µs)", func(r Row) float64 { return r.QCTP99 }, 0, false},
			{"median over idle (µs)", overIdle, 0, false},
		})
}

// probeNote says how the probe columns differ from the per-packet ones.
const probeNote = "The probe columns, where a probe stream ran, are its packets' alone: " +
	"they sample the queue at fixed times, as HULL's LMM did, so idle time counts; " +
	"the per-packet mean weights each moment by the packets it carried, which puts it near the probes' mean over the port's utilization (Little's law)."

// hullTable is HULL Table 4's shape: switch latency and the 1 KB and
// 10 MB flows' completion times.
func hullTable(b *strings.Builder, sh shape, rows []Row) {
	section(b, sh, rows, "Switch latency and flow completion (HULL Table 4's shape)",
		"Switch latency is the LMM's per-packet measurement from captures at the switch's ports. "+probeNote,
		[]column{
			{"switch latency avg (µs)", func(r Row) float64 { return r.LatAvg }, 1, false},
			{"90th (µs)", func(r Row) float64 { return r.LatP90 }, 1, false},
			{"99th (µs)", func(r Row) float64 { return r.LatP99 }, 1, false},
			{"probe avg (µs)", func(r Row) float64 { return r.ProbeAvg }, 1, false},
			{"probe 99th (µs)", func(r Row) float64 { return r.ProbeP99 }, 1, false},
			{"1KB FCT avg (µs)", func(r Row) float64 { return r.FCT1KBAvg }, 0, false},
			{"1KB FCT 99th (µs)", func(r Row) float64 { return r.FCT1KBP99 }, 0, false},
			{"10MB FCT avg (ms)", func(r Row) float64 { return r.FCT10MBAvg }, 1, false},
		})
}

func latencyTable(b *strings.Builder, sh shape, rows []Row) {
	section(b, sh, rows, "Switch latency",
		"The LMM's per-packet measurement from captures at the switch's ports. "+probeNote,
		[]column{
			{"avg (µs)", func(r Row) float64 { return r.LatAvg }, 1, false},
			{"90th (µs)", func(r Row) float64 { return r.LatP90 }, 1, false},
			{"99th (µs)", func(r Row) float64 { return r.LatP99 }, 1, false},
			{"probe avg (µs)", func(r Row) float64 { return r.ProbeAvg }, 1, false},
			{"probe 99th (µs)", func(r Row) float64 { return r.ProbeP99 }, 1, false},
		})
}

// slowdownTables shows the slowdown of all flows and per size range.
func slowdownTables(b *strings.Builder, sh shape, rows []Row) {
	cols := []column{
		{"all p50", func(r Row) float64 { return r.SlowP50 }, 2, false},
		{"all p99", func(r Row) float64 { return r.SlowP99 }, 2, false},
	}
	if len(rows) > 0 {
		for i, c := range rows[0].Sizes {
			cols = append(cols,
				column{c.Bucket + " p50", func(r Row) float64 { return r.Sizes[i].P50 }, 2, false},
				column{c.Bucket + " p99", func(r Row) float64 { return r.Sizes[i].P99 }, 2, false})
		}
	}
	section(b, sh, rows, "Flow slowdown by size",
		"Slowdown = FCT / ideal, the ideal being the flow alone in the lab: all but its last packet at the bottleneck rate, "+
			"the last packet's serialisation at each delayed link (a link without a delay line passes a lone packet at once), "+
			"and half the unloaded RTT (results/flows).", cols)
}

// section writes a titled table, or nothing when no row has a value for
// any of its columns.
func section(b *strings.Builder, sh shape, rows []Row, title, intro string, cols []column) {
	cols = nonEmpty(rows, cols)
	if len(cols) == 0 {
		return
	}
	fmt.Fprintf(b, "\n## %s\n\n%s\n\n", title, intro)
	table(b, sh.keys, rows, cols)
}

// nonEmpty drops the columns no row has a value in.
func nonEmpty(rows []Row, cols []column) []column {
	var out []column
	for _, c := range cols {
		if slices.ContainsFunc(rows, func(r Row) bool { return !math.IsNaN(c.get(r)) }) {
			out = append(out, c)
		}
	}
	return out
}

// column is one statistic of a table.
type column struct {
	name         string
	get          func(Row) float64
	prec         int
	higherBetter bool // throughput; latencies and FCTs are better lower
}

// table writes rows with a column per sweep key, the scheme, the trial
// count, cols and the fidelity flag. The rows it writes are those with a
// value in some column.
func table(b *strings.Builder, keys []string, rows []Row, cols []column) {
	rows = slices.DeleteFunc(slices.Clone(rows), func(r Row) bool {
		return !slices.ContainsFunc(cols, func(c column) bool { return !math.IsNaN(c.get(r)) })
	})
	t := Table{Header: slices.Concat(keys, []string{"scheme", "trials"}), Right: make([]bool, len(keys)+1)}
	t.Right = append(t.Right, true)
	for _, c := range cols {
		t.Header = append(t.Header, c.name)
		t.Right = append(t.Right, true)
	}
	t.Header = append(t.Header, "fidelity")
	best := bestPerKeys(rows, cols)
	for _, r := range rows {
		cells := slices.Concat(r.Keys, []string{r.Scheme, strconv.Itoa(r.Trials)})
		id := strings.Join(r.Keys, "\x00")
		for i, c := range cols {
			v := c.get(r)
			cell := num(v, c.prec)
			if !math.IsNaN(v) && v == best[id][i] && countWithKeys(rows, id) > 1 {
				cell = "**" + cell + "**"
			}
			cells = append(cells, cell)
		}
		flag := "ok"
		if r.Unfaith > 0 {
			flag = fmt.Sprintf("%d of %d unfaithful", r.Unfaith, r.Trials)
		}
		t.Rows = append(t.Rows, append(cells, flag))
	}
	b.WriteString(t.Markdown())
}

// bestPerKeys is, per set of sweep values, each column's best value.
func bestPerKeys(rows []Row, cols []column) map[string][]float64 {
	best := map[string][]float64{}
	for _, r := range rows {
		id := strings.Join(r.Keys, "\x00")
		if best[id] == nil {
			best[id] = make([]float64, len(cols))
			for i, c := range cols {
				best[id][i] = math.Inf(1)
				if c.higherBetter {
					best[id][i] = math.Inf(-1)
				}
			}
		}
		for i, c := range cols {
			v := c.get(r)
			if !math.IsNaN(v) && (c.higherBetter && v > best[id][i] || !c.higherBetter && v < best[id][i]) {
				best[id][i] = v
			}
		}
	}
	return best
}

func countWithKeys(rows []Row, id string) int {
	n := 0
	for _, r := range rows {
		if strings.Join(r.Keys, "\x00") == id {
			n++
		}
	}
	return n
}

// spectrumTables renders the slowdown spectrum (Homa's Fig. 6.1 as
// numbers): per row, the 99th-percentile and median slowdown of each tenth
// of the flows by size, shortest first, and the shortest half's.
func spectrumTables(b *strings.Builder, sh shape, rows []Row) {
	var with []Row
	for _, r := range rows {
		if len(r.Spectrum) > 0 {
			with = append(with, r)
		}
	}
	if len(with) == 0 {
		return
	}
	section(b, sh, with, "Slowdown spectrum",
		"Flows are ranked by size and cut into ten groups of equal count (the x axis of Homa's slowdown spectrum, "+
			"Montazeri's thesis Fig. 6.1); each cell is the group's percentile, and in brackets the group's largest size "+
			"in the row's first trial. First the shortest half of the flows together:",
		[]column{
			{"shortest 50% p50", func(r Row) float64 { return r.ShortP50 }, 2, false},
			{"shortest 50% p99", func(r Row) float64 { return r.ShortP99 }, 2, false},
		})
	for _, pct := range []struct {
		name string
		get  func(SpectrumCell) float64
	}{{"99th percentile", func(c SpectrumCell) float64 { return c.P99 }}, {"median", func(c SpectrumCell) float64 { return c.P50 }}} {
		t := Table{Header: slices.Concat(sh.keys, []string{"scheme"}), Right: make([]bool, len(sh.keys)+1)}
		for _, c := range with[0].Spectrum {
			t.Header = append(t.Header, fmt.Sprintf("≤%g%%", c.Hi*100))
			t.Right = append(t.Right, true)
		}
		for _, r := range with {
			cells := slices.Concat(r.Keys, []string{r.Scheme})
			for _, c := range r.Spectrum {
				cells = append(cells, fmt.Sprintf("%s (%s)", num(pct.get(c), 2), sizeText(c.MaxSize)))
			}
			t.Rows = append(t.Rows, cells)
		}
		fmt.Fprintf(b, "\n%s slowdown by size group:\n\n%s", pct.name, t.Markdown())
	}
}

// sizeText writes a byte count the short way: 512B, 12.5KB, 3MB.
func sizeText(n int64) string {
	switch {
	case n >= 1e6:
		return strconv.FormatFloat(float64(n)/1e6, 'g', 3, 64) + "MB"
	case n >= 1e3:
		return strconv.FormatFloat(float64(n)/1e3, 'g', 3, 64) + "KB"
	}
	return strconv.FormatInt(n, 10) + "B"
}

func fidelitySection(b *strings.Builder, trials []*TrialSummary) {
	b.WriteString("\n## Fidelity\n\n")
	bad, badStolen := 0, 0
	for _, t := range trials {
		f := t.Fidelity
		if f.Faithful() && len(f.Notes) == 0 && f.Advice == "" && len(f.PacerErrors) == 0 && f.IncompleteFlows == 0 && f.LMMUnmatched == 0 && !f.NotableSteal() {
			continue
		}
		if !f.Faithful() {
			bad++
			if f.NotableSteal() {
				badStolen++
			}
		}
		fmt.Fprintf(b, "- %s, trial %d: %s", t.Scheme, t.Trial, f.Flags())
		if f.LMMUnmatched > 0 {
			fmt.Fprintf(b, "; %d packets dropped in the switch (LMM unmatched)", f.LMMUnmatched)
		}
		if f.IncompleteFlows > 0 {
			fmt.Fprintf(b, "; %d incomplete flows left out of FCTs", f.IncompleteFlows)
		}
		if f.NotableSteal() {
			fmt.Fprintf(b, "; the hypervisor took %.1f %% of the CPU (steal)", f.CPUStealPct)
		}
		for _, e := range f.CPUTail {
			if e.Distorted() {
				b.WriteString("; " + e.String())
			}
		}
		if f.Advice != "" {
			b.WriteString("; " + f.Advice)
		}
		for _, e := range f.PacerErrors {
			b.WriteString("; pacer: " + e)
		}
		for _, n := range f.Notes {
			b.WriteString("; " + n)
		}
		b.WriteString("\n")
	}
	if bad == 0 {
		b.WriteString("\nAll trials faithful: no capture drops, CPU not saturated, delay lines on time.\n")
	} else {
		fmt.Fprintf(b, "\n%d trial(s) are flagged and should not be believed. Lower the offered load or the emulated link rate "+
			"(e.g. 100 Mbit instead of 1 Gbit), capture fewer ports or use a probe-only capture filter, and rerun.\n", bad)
		if badStolen > 0 {
			fmt.Fprintf(b, "%d of them ran while the hypervisor took %.0f %% or more of the CPU: a busy host under this virtual machine, "+
				"which neither a lower load nor a lower rate gives back; rerun them when the host is quieter.\n", badStolen, cpustat.NotableStealPct)
		}
	}
}

func figureList(b *strings.Builder, figures []string) {
	if len(figures) == 0 {
		return
	}
	b.WriteString("\n## Figures\n\n")
	for _, f := range figures {
		if strings.HasSuffix(f, ".png") {
			name := filepath.Base(f)
			fmt.Fprintf(b, "- [%s](%s)\n", strings.TrimSuffix(name, ".png"), name)
		}
	}
}
