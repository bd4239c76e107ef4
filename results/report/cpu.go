package report

import (
	"cmp"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"

	"github.com/fabric-emu/fabric/results/plot"
)

// CPUAccount is where a trial's CPU went during its traffic (meta.json's
// cpu_account): the runner's samples on cpu.csv's clock, each what the
// machine's CPUs did over one interval, in ticks of TicksPerSecond summed
// over the CPUs.
type CPUAccount struct {
	CPUs           int `json:"cpus"`
	TicksPerSecond int `json:"ticks_per_second"`
	// StartNS is the samples' zero on CLOCK_REALTIME, the records'
	// clock (0 in runs from before it was kept).
	StartNS int64       `json:"start_ns,omitempty"`
	Samples []CPUSample `json:"samples"`
	// Hosts is each host's transport over the whole traffic, ticks.
	Hosts map[string]uint64 `json:"hosts,omitempty"`
	// Others is what every other process on the machine used over the
	// samples, ticks: read at their start and end only, so it has no
	// series (the kernel's softirq threads are in Softirq instead).
	Others *uint64 `json:"others,omitempty"`
}

// CPUSample is one interval of a CPUAccount, in ticks. Idle, Steal and
// Softirq are the kernel's (/proc/stat); the rest are processes' and
// threads' user and system time (their stat files).
type CPUSample struct {
	// Seconds is the interval's end since the sampling began, as in
	// cpu.csv; the interval began at the sample before's end (or at 0).
	Seconds float64 `json:"s"`
	// Total is the kernel's ticks of the interval, all of /proc/stat's
	// fields. The shares are of the wall-clock time instead: the kernel
	// classifies busy time by the tick that lands in it, and a CPU that
	// wakes from idle for less than a tick is often not ticked at all,
	// while idle time and the processes' times are kept exactly.
	Total uint64 `json:"total"`
	Idle  uint64 `json:"idle"`
	Steal uint64 `json:"steal"`
	// Softirq is each CPU's softirq and irq time, in the kernel's order.
	Softirq []uint64 `json:"softirq"`
	// Transports is the scheme's transport processes', Probes the LMM's
	// probe processes'.
	Transports uint64 `json:"transports"`
	Probes     uint64 `json:"probes,omitempty"`
	// Fabric is fabric's own process, its loops included; DelayLines,
	// Captures, Pacers and Sampler are the threads or turns of its loops,
	// timed to the nanosecond and so kept with a tick's fractions: a
	// light loop's whole trial can be less than one.
	Fabric     uint64  `json:"fabric"`
	DelayLines float64 `json:"delay_lines"`
	Captures   float64 `json:"captures"`
	Pacers     float64 `json:"pacers"`
	Sampler    float64 `json:"sampler"`
}

// CPUShares is how the machine's CPU time was spent over some samples, in
// percent of all of it (wall-clock time × CPUs: 100 % is every core).
// The parts and Idle sum to 100, Unaccounted being what is left of the
// busy time.
//
// On a kernel without CONFIG_IRQ_TIME_ACCOUNTING (Debian's, this
// project's machines) a process's time includes the softirq work that ran
// on it, as in its system calls, which /proc/stat counts as softirq too:
// the parts then overlap by that much, and Unaccounted can be negative.
type CPUShares struct {
	Transports float64
	DelayLines float64
	Captures   float64 // the captures' loops and the LMM's probe processes
	Pacers     float64
	Sampler    float64
	Fabric     float64 // the rest of fabric's process: its runtime, the runner
	Softirq    float64
	Steal      float64
	// Others is every other process on the machine, known over a whole
	// account only (NaN otherwise: then it is in Unaccounted).
	Others      float64
	Unaccounted float64
	Idle        float64
	// SoftirqByCPU is Softirq by CPU, in the kernel's order.
	SoftirqByCPU []float64
}

// CPUPart is one part of CPUShares, by name.
type CPUPart struct {
	Name string  `json:"name"`
	Pct  float64 `json:"pct"`
}

// The parts' names, as the report's table and the runner's advice call
// them.
const (
	PartTransports  = "transports"
	PartDelayLines  = "delay lines"
	PartCaptures    = "captures and LMM"
	PartPacers      = "pacers"
	PartSampler     = "sampler"
	PartFabric      = "fabric, rest"
	PartSoftirq     = "softirq"
	PartSteal       = "steal"
	PartOthers      = "other processes"
	PartUnaccounted = "unaccounted"
	PartIdle        = "idle"
)

// cpuPartNames are the parts in the report's order.
var cpuPartNames = []string{PartTransports, PartDelayLines, PartCaptures, PartPacers, PartSampler, PartFabric,
	PartSoftirq, PartSteal, PartOthers, PartUnaccounted, PartIdle}

// Parts are the shares' parts in the report's order, Idle last (Others
// only when known).
func (s CPUShares) Parts() []CPUPart {
	pcts := []float64{s.Transports, s.DelayLines, s.Captures, s.Pacers, s.Sampler, s.Fabric, s.Softirq, s.Steal,
		s.Others, s.Unaccounted, s.Idle}
	var parts []CPUPart
	for i, name := range cpuPartNames {
		if !math.IsNaN(pcts[i]) {
			parts = append(parts, CPUPart{name, pcts[i]})
		}
	}
	return parts
}

// Largest are the parts other than Idle that took the most, largest
// first, up to n of them and none below minPct.
func (s CPUShares) Largest(n int, minPct float64) []CPUPart {
	parts := slices.DeleteFunc(s.Parts(), func(p CPUPart) bool { return p.Name == PartIdle || p.Pct < minPct })
	slices.SortStableFunc(parts, func(a, b CPUPart) int { return cmp.Compare(b.Pct, a.Pct) })
	return parts[:min(n, len(parts))]
}

// Busy is the share that was not idle.
func (s CPUShares) Busy() float64 { return 100 - s.Idle }

// Shares sums the samples that keep says to keep (nil: all of them, and
// then Others is known) and returns their shares; ok is false when they
// cover no time.
func (a *CPUAccount) Shares(keep func(i int) bool) (s CPUShares, ok bool) {
	var sum CPUSample
	var machine, prev float64 // ticks the CPUs had; the sample before's end
	for i, c := range a.Samples {
		span := c.Seconds - prev
		prev = c.Seconds
		if keep != nil && !keep(i) {
			continue
		}
		machine += span * float64(a.CPUs*a.TicksPerSecond)
		sum = sum.Merged(c)
	}
	if machine <= 0 {
		return CPUShares{}, false
	}
	pct := func(v uint64) float64 { return 100 * float64(v) / machine }
	pctf := func(v float64) float64 { return 100 * v / machine }
	loops := sum.DelayLines + sum.Captures + sum.Pacers + sum.Sampler
	var softirq uint64
	for _, v := range sum.Softirq {
		softirq += v
		s.SoftirqByCPU = append(s.SoftirqByCPU, pct(v))
	}
	s = CPUShares{SoftirqByCPU: s.SoftirqByCPU,
		Transports: pct(sum.Transports), DelayLines: pctf(sum.DelayLines), Captures: pct(sum.Probes) + pctf(sum.Captures),
		Pacers: pctf(sum.Pacers), Sampler: pctf(sum.Sampler), Softirq: pct(softirq), Steal: pct(sum.Steal),
		Others: math.NaN(), Idle: min(pct(sum.Idle), 100),
	}
	if keep == nil && a.Others != nil {
		s.Others = pct(*a.Others)
	}
	// The process's time is rounded down to a tick and its loops' are
	// not: the rest can come out a tick below zero.
	if f := float64(sum.Fabric); f > loops {
		s.Fabric = pctf(f - loops)
	}
	s.Unaccounted = 100 - s.Idle
	for _, p := range s.Parts() {
		if p.Name != PartIdle && p.Name != PartUnaccounted {
			s.Unaccounted -= p.Pct
		}
	}
	return s, true
}

// Merged is a and the sample after it, b, as one: their ticks summed, b's
// end.
func (a CPUSample) Merged(b CPUSample) CPUSample {
	a.Seconds = b.Seconds
	a.Total += b.Total
	a.Idle += b.Idle
	a.Steal += b.Steal
	a.Softirq = slices.Clone(a.Softirq)
	for i, v := range b.Softirq {
		if i < len(a.Softirq) {
			a.Softirq[i] += v
		} else {
			a.Softirq = append(a.Softirq, v)
		}
	}
	a.Transports += b.Transports
	a.Probes += b.Probes
	a.Fabric += b.Fabric
	a.DelayLines += b.DelayLines
	a.Captures += b.Captures
	a.Pacers += b.Pacers
	a.Sampler += b.Sampler
	return a
}

// cpuSection is the report's "Where the CPU went": per row, the mean of
// its trials' shares over their traffic. Runs from before the account
// have none, and get no section.
func cpuSection(b *strings.Builder, sh shape, trials []*TrialSummary) {
	type row struct {
		g      group
		n      int
		shares CPUShares
	}
	var rows []row
	for _, g := range groups(trials, sh.keys) {
		r := row{g: g}
		for _, t := range g.trials {
			if t.CPU == nil {
				continue
			}
			s, ok := t.CPU.Shares(nil)
			if !ok {
				continue
			}
			r.n++
			r.shares = r.shares.plus(s, r.n)
		}
		if r.n > 0 {
			rows = append(rows, r)
		}
	}
	if len(rows) == 0 {
		return
	}
	b.WriteString("\n## Where the CPU went\n\n" +
		"Shares of the machine's CPU time during the traffic (wall-clock time × its cores = 100 %), the mean over the row's " +
		"trials: fabric's transports and loops (their processes' and threads' user and system time), the kernel's softirq " +
		"(where the lab's packets are forwarded; per CPU in brackets), the hypervisor's steal, every other process on the " +
		"machine, and what is left of the busy time. A process's time includes the softirq work that ran on it, which the " +
		"kernel counts as softirq too unless it was built with CONFIG_IRQ_TIME_ACCOUNTING: the parts then overlap, and " +
		"unaccounted comes out below zero by as much. The cpu-SCHEME figures show a row's first trial over time, and each " +
		"trial's directory its own (cpu-account.png).\n\n|")
	sep := "|"
	for _, k := range sh.keys {
		b.WriteString(" " + k + " |")
		sep += "---|"
	}
	b.WriteString(" scheme | trials |")
	sep += "---|---:|"
	for _, n := range cpuPartNames {
		b.WriteString(" " + n + " (%) |")
		sep += "---:|"
	}
	b.WriteString("\n" + sep + "\n")
	for _, r := range rows {
		b.WriteString("|")
		for _, v := range r.g.keys {
			b.WriteString(" " + v + " |")
		}
		fmt.Fprintf(b, " %s | %d |", r.g.scheme, r.n)
		parts := r.shares.Parts()
		for _, n := range cpuPartNames {
			i := slices.IndexFunc(parts, func(p CPUPart) bool { return p.Name == n })
			cell := "–"
			if i >= 0 {
				cell = num(parts[i].Pct, 1)
			}
			if n == PartSoftirq && len(r.shares.SoftirqByCPU) > 1 {
				var by []string
				for _, v := range r.shares.SoftirqByCPU {
					by = append(by, num(v, 1))
				}
				cell += " (" + strings.Join(by, " / ") + ")"
			}
			b.WriteString(" " + cell + " |")
		}
		b.WriteString("\n")
	}
}

// plus is the running mean of n shares, s being the n-th (Others stays
// unknown if it is unknown in any).
func (m CPUShares) plus(s CPUShares, n int) CPUShares {
	f := func(a, b float64) float64 { return a + (b-a)/float64(n) }
	out := CPUShares{
		Transports: f(m.Transports, s.Transports), DelayLines: f(m.DelayLines, s.DelayLines), Captures: f(m.Captures, s.Captures),
		Pacers: f(m.Pacers, s.Pacers), Sampler: f(m.Sampler, s.Sampler), Fabric: f(m.Fabric, s.Fabric), Softirq: f(m.Softirq, s.Softirq),
		Steal: f(m.Steal, s.Steal), Others: f(m.Others, s.Others), Unaccounted: f(m.Unaccounted, s.Unaccounted), Idle: f(m.Idle, s.Idle),
	}
	for i, v := range s.SoftirqByCPU {
		var had float64
		if i < len(m.SoftirqByCPU) {
			had = m.SoftirqByCPU[i]
		}
		out.SoftirqByCPU = append(out.SoftirqByCPU, f(had, v))
	}
	return out
}

// cpuFigureEvery is how much of the traffic one point of the CPU figure
// covers: a process's time moves in whole ticks (10 ms), a tenth of a
// sample of a core, so single samples jump by that much.
const cpuFigureEvery = 1.0 // s

// DrawCPU draws an account's shares over the traffic as stacked bands
// into base.png and base.svg (nothing when it covers less than two
// points).
func DrawCPU(base, title string, a *CPUAccount) (drawn bool, err error) {
	var x []float64
	var shares []CPUShares
	from, start := 0, 0.0
	for i, c := range a.Samples {
		if c.Seconds-start < cpuFigureEvery && i < len(a.Samples)-1 {
			continue
		}
		if s, ok := a.Shares(func(j int) bool { return j >= from && j <= i }); ok {
			x = append(x, (start+c.Seconds)/2)
			shares = append(shares, s)
		}
		from, start = i+1, c.Seconds
	}
	if len(x) < 2 {
		return false, nil
	}
	var layers []plot.Layer
	for k, part := range shares[0].Parts() {
		l := plot.Layer{Label: part.Name}
		switch part.Name {
		case PartIdle:
			l.Color = plot.Pale
		case PartUnaccounted: // the other processes are known for the whole traffic only
			l.Label = "unaccounted, other processes included"
		}
		for _, s := range shares {
			l.Y = append(l.Y, s.Parts()[k].Pct)
		}
		layers = append(layers, l)
	}
	fig := plot.Figure{Title: title, XLabel: "time (s)", YLabel: "share of the machine's CPU (%)"}
	return true, plot.Stacked(base, fig, x, layers)
}

// cpu draws, for each scheme's first trial, where its CPU went over time.
func (f *figures) cpu(g keyGroup) error {
	for _, t := range g.first {
		if t.CPU == nil {
			continue
		}
		base := filepath.Join(f.dir, "cpu-"+slug(t.scheme())+g.suffix)
		drawn, err := DrawCPU(base, fmt.Sprintf("Where the CPU went, %s%s, trial %d", t.scheme(), g.title, t.Trial), t.CPU)
		if drawn || err != nil {
			if err := f.add(base, err); err != nil {
				return err
			}
		}
	}
	return nil
}
