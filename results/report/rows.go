package report

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/fabric-emu/fabric/results/flows"
	"github.com/fabric-emu/fabric/results/stats"
)

// Row is one scheme at one set of sweep values: each cell is the mean over
// the row's trials of that trial's statistic (NaN: not measured).
type Row struct {
	Scheme string   // the scheme (for runs that did not record it, the point's label)
	Keys   []string // the sweep values, in Report.Keys order
	Sweep  []SweepValue
	Load   float64 // offered load, 0 when none
	// Carried is the load the busiest open-loop port carried
	// (Fidelity.CarriedLoad), the mean over the trials; NaN when none.
	Carried float64
	Trials  int
	Unfaith int // trials flagged unfaithful

	LatAvg, LatP90, LatP99 float64 // switch latency over every packet, µs
	ProbeAvg, ProbeP99     float64 // the probe stream's switch latency, µs
	FCT1KBAvg, FCT1KBP99   float64 // µs
	FCT10MBAvg             float64 // ms
	QCTAvg, QCTP50, QCTP99 float64 // µs
	// Long-lived flows: per-flow throughput (Mbit/s) mean, min and median,
	// the receivers' links' utilization and Jain's fairness index.
	TputMbps, TputMin, TputMedian float64
	Utilization, Jain             float64
	// Slowdown of all flows, per size range (flows.SizeBuckets order), of
	// the shortest half, and the spectrum's bins.
	SlowP50, SlowP99   float64
	Sizes              []SizeCell
	ShortP50, ShortP99 float64
	Spectrum           []SpectrumCell
	// Classes are the traffic classes' slowdowns and SLO verdicts.
	Classes []ClassCell
	// Metrics are the transport's own, each the mean over the trials.
	Metrics  []MetricValue
	classBDP int64 // the first trial's BDP, bytes
}

// Value is the row's value of sweep key, or "" when it has none.
func (r Row) Value(key string) string {
	for _, v := range r.Sweep {
		if v.Key == key {
			return v.Value
		}
	}
	return ""
}

// SizeCell is a row's slowdown in one flow-size range.
type SizeCell struct {
	Bucket   string
	N        int // flows, summed over the trials
	P50, P99 float64
}

// SpectrumCell is one bin of a row's slowdown spectrum.
type SpectrumCell struct {
	Hi       float64 // the bin's upper count quantile
	MaxSize  int64   // its largest flow, in the row's first trial
	P50, P99 float64
}

// group is the trials of one row.
type group struct {
	scheme string
	keys   []string
	load   float64
	trials []*TrialSummary
}

// sweepKeys are the keys the trials were swept over, in order of first
// appearance. Trials from runs that recorded none are keyed by load when
// they have one, as the reports of those runs were.
func sweepKeys(trials []*TrialSummary) []string {
	var keys []string
	for _, t := range trials {
		for _, v := range t.sweep() {
			if !slices.Contains(keys, v.Key) {
				keys = append(keys, v.Key)
			}
		}
	}
	return keys
}

// sweep is the trial's sweep values, with the fallback for old runs.
func (t *TrialSummary) sweep() []SweepValue {
	if t.SchemeName == "" && t.Sweep == nil && t.Load > 0 {
		return []SweepValue{{Key: "load", Value: loadText(t.Load)}}
	}
	return t.Sweep
}

// scheme is the row a trial belongs to, by scheme.
func (t *TrialSummary) scheme() string {
	if t.SchemeName != "" {
		return t.SchemeName
	}
	return t.Scheme
}

// groups orders rows by their sweep values (numbers by value) and, within
// one set of values, schemes in order of first appearance.
func groups(trials []*TrialSummary, keys []string) []group {
	trials = slices.Clone(trials)
	slices.SortStableFunc(trials, func(a, b *TrialSummary) int { return a.PointIndex - b.PointIndex })
	var schemes []string
	byKey := map[string]*group{}
	var out []*group
	for _, t := range trials {
		if !slices.Contains(schemes, t.scheme()) {
			schemes = append(schemes, t.scheme())
		}
		vals := make([]string, len(keys))
		for _, v := range t.sweep() {
			vals[slices.Index(keys, v.Key)] = v.Value
		}
		id := t.scheme() + "\x00" + strings.Join(vals, "\x00")
		g := byKey[id]
		if g == nil {
			g = &group{scheme: t.scheme(), keys: vals, load: t.Load}
			byKey[id] = g
			out = append(out, g)
		}
		g.trials = append(g.trials, t)
	}
	slices.SortStableFunc(out, func(a, b *group) int {
		for i := range a.keys {
			if c := naturalCompare(a.keys[i], b.keys[i]); c != 0 {
				return c
			}
		}
		return slices.Index(schemes, a.scheme) - slices.Index(schemes, b.scheme)
	})
	res := make([]group, len(out))
	for i, g := range out {
		slices.SortFunc(g.trials, func(a, b *TrialSummary) int { return a.Trial - b.Trial })
		res[i] = *g
	}
	return res
}

// naturalCompare orders strings with their numbers by value: "n2" before
// "n10", "64KB" before "512KB", "20%" before "80%".
func naturalCompare(a, b string) int {
	for a != "" && b != "" {
		na, ra := leadingNumber(a)
		nb, rb := leadingNumber(b)
		if ra != a && rb != b { // both start with a number
			if c := compareFloat(na, nb); c != 0 {
				return c
			}
			a, b = ra, rb
			continue
		}
		if a[0] != b[0] {
			return int(a[0]) - int(b[0])
		}
		a, b = a[1:], b[1:]
	}
	return len(a) - len(b)
}

func compareFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// leadingNumber splits a leading decimal number off s.
func leadingNumber(s string) (float64, string) {
	i := strings.IndexFunc(s, func(r rune) bool { return !unicode.IsDigit(r) && r != '.' })
	if i < 0 {
		i = len(s)
	}
	v, err := strconv.ParseFloat(s[:i], 64)
	if err != nil || i == 0 {
		return 0, s
	}
	return v, s[i:]
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

func mean(s stats.Summary) float64 { return s.Mean }
func p50(s stats.Summary) float64  { return s.P50 }
func p90(s stats.Summary) float64  { return s.P90 }
func p99(s stats.Summary) float64  { return s.P99 }

func aggregate(trials []*TrialSummary, keys []string) []Row {
	var rows []Row
	for _, g := range groups(trials, keys) {
		r := Row{Scheme: g.scheme, Keys: g.keys, Load: g.load, Trials: len(g.trials), Metrics: rowMetrics(g.trials)}
		for i, k := range keys {
			if g.keys[i] != "" {
				r.Sweep = append(r.Sweep, SweepValue{Key: k, Value: g.keys[i]})
			}
		}
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
		qct := func(t *TrialSummary) *stats.Summary { return t.QCTUS }
		tp := func(t *TrialSummary) *stats.Summary { return t.ThroughputMbp }
		all := func(t *TrialSummary) *stats.Summary { return t.SlowdownAll }
		short := func(t *TrialSummary) *stats.Summary { return t.ShortHalf }
		r.LatAvg, r.LatP90, r.LatP99 = stat(lat, mean), stat(lat, p90), stat(lat, p99)
		r.Carried = meanOf(g.trials, func(t *TrialSummary) (float64, bool) { return t.Fidelity.CarriedLoad() })
		probe := func(t *TrialSummary) *stats.Summary { return t.ProbeLatencyUS }
		r.ProbeAvg, r.ProbeP99 = stat(probe, mean), stat(probe, p99)
		r.FCT1KBAvg, r.FCT1KBP99 = stat(k1, mean), stat(k1, p99)
		r.FCT10MBAvg = stat(func(t *TrialSummary) *stats.Summary { return t.FCT10MBUS }, mean) / 1e3
		r.QCTAvg, r.QCTP50, r.QCTP99 = stat(qct, mean), stat(qct, p50), stat(qct, p99)
		r.TputMbps, r.TputMedian = stat(tp, mean), stat(tp, p50)
		r.TputMin = stat(tp, func(s stats.Summary) float64 { return s.Min })
		long := func(v func(*TrialSummary) float64) float64 {
			return meanOf(g.trials, func(t *TrialSummary) (float64, bool) { return v(t), t.ThroughputMbp != nil })
		}
		r.Utilization = long(func(t *TrialSummary) float64 { return t.Utilization })
		r.Jain = long(func(t *TrialSummary) float64 { return t.Jain })
		r.SlowP50, r.SlowP99 = stat(all, p50), stat(all, p99)
		r.ShortP50, r.ShortP99 = stat(short, p50), stat(short, p99)
		r.Sizes = sizesOf(g.trials)
		r.Spectrum = spectrumOf(g.trials)
		r.Classes = classesOf(g.trials)
		for _, t := range g.trials {
			if len(t.Classes) > 0 && r.classBDP == 0 {
				r.classBDP = t.Classes[0].BDP
			}
		}
		rows = append(rows, r)
	}
	return rows
}

// sizesOf averages the trials' slowdowns per size range.
func sizesOf(trials []*TrialSummary) []SizeCell {
	var out []SizeCell
	for _, b := range flows.SizeBuckets {
		c := SizeCell{Bucket: b.Name}
		at := func(pick func(flows.BucketStats) float64) float64 {
			return meanOf(trials, func(t *TrialSummary) (float64, bool) {
				for _, s := range t.SizeSlowdown {
					if s.Bucket == b.Name && s.N > 0 {
						return pick(s), true
					}
				}
				return 0, false
			})
		}
		for _, t := range trials {
			for _, s := range t.SizeSlowdown {
				if s.Bucket == b.Name {
					c.N += s.N
				}
			}
		}
		c.P50 = at(func(s flows.BucketStats) float64 { return s.Slowdown.P50 })
		c.P99 = at(func(s flows.BucketStats) float64 { return s.Slowdown.P99 })
		out = append(out, c)
	}
	return out
}

// spectrumOf averages the trials' spectra bin by bin.
func spectrumOf(trials []*TrialSummary) []SpectrumCell {
	var out []SpectrumCell
	for _, t := range trials {
		if len(t.Spectrum) == 0 {
			continue
		}
		for _, b := range t.Spectrum {
			out = append(out, SpectrumCell{Hi: b.Hi, MaxSize: b.MaxSize})
		}
		break
	}
	for k := range out {
		at := func(pick func(b flows.SpectrumBin) float64) float64 {
			return meanOf(trials, func(t *TrialSummary) (float64, bool) {
				if len(t.Spectrum) != len(out) {
					return 0, false
				}
				return pick(t.Spectrum[k]), true
			})
		}
		out[k].P50 = at(func(b flows.SpectrumBin) float64 { return b.P50 })
		out[k].P99 = at(func(b flows.SpectrumBin) float64 { return b.P99 })
	}
	return out
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
