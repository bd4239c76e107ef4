package experiments

import (
	"fmt"
	"hash/fnv"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/fabric-emu/fabric/internal/units"
	"github.com/fabric-emu/fabric/results/report"
)

// Point is one combination of the sweep: a scheme and the traffic values
// that vary. Its Name names its directory.
type Point struct {
	Index   int        `json:"index"`
	Name    string     `json:"name"`
	Scheme  string     `json:"scheme"`
	Load    float64    `json:"load,omitempty"`
	Senders int        `json:"senders,omitempty"`
	Flows   int        `json:"flows,omitempty"`
	Size    units.Size `json:"size,omitempty"`
	// Delay is every link's one-way delay when the sweep varies it.
	Delay time.Duration `json:"delay,omitempty"`
	// Workload is the flow-size distribution when the sweep varies it.
	Workload string `json:"workload,omitempty"`
	// Rate is every link's rate and Weights the weighted ports' weights
	// at a capacity search's probe (SearchSpec); unset otherwise.
	Rate    units.Rate `json:"rate,omitempty"`
	Weights []int      `json:"weights,omitempty"`
	// Traffic names the point's traffic without the scheme: every scheme
	// at the same traffic values and trial number gets the same seed, so
	// schemes are compared on the same flow sizes and arrival times
	// (common random numbers), not on different draws.
	Traffic string `json:"traffic"`
}

// Points expands the sweep: scheme × load × senders × flows × size, in
// that nesting order (schemes vary fastest within a load, as the paper's
// tables are laid out: one row per load, one column per scheme).
func (s *Spec) Points() []Point {
	schemes := s.sweptSchemes()
	t := s.Traffic
	loads := orOne(s.Sweep.Load, t.Load)
	senders := orOne(s.Sweep.Senders, t.Senders)
	flows := orOne(s.Sweep.Flows, t.Flows)
	sizes := orOne(s.Sweep.Size, t.Size)
	delays := orOne(s.Sweep.Delay, 0) // unswept: labFor keeps the lab's own delays
	var out []Point
	for _, w := range orOne(s.Sweep.Workload, "") {
		out = append(out, s.pointsOf(w, delays, loads, senders, flows, sizes, schemes)...)
	}
	for i := range out {
		out[i].Index = i
	}
	return out
}

// sweptSchemes are the schemes sweep.scheme names, in order ("all": the
// file's order).
func (s *Spec) sweptSchemes() []string {
	schemes := []string(s.Sweep.Scheme)
	if len(schemes) == 0 || len(schemes) == 1 && schemes[0] == "all" {
		schemes = s.SchemeOrder
	}
	return schemes
}

// pointsOf expands the sweep's other keys for one workload.
func (s *Spec) pointsOf(w string, delays []Duration, loads []float64, senders, flows []int, sizes []units.Size, schemes []string) []Point {
	var out []Point
	for _, d := range delays {
		for _, l := range loads {
			for _, n := range senders {
				for _, fl := range flows {
					for _, sz := range sizes {
						for _, sc := range schemes {
							p := Point{Scheme: sc, Load: l, Senders: n, Flows: fl, Size: sz, Delay: time.Duration(d), Workload: w}
							p.Name, p.Traffic = p.name(s)
							out = append(out, p)
						}
					}
				}
			}
		}
	}
	return out
}

func orOne[T any](list []T, v T) []T {
	if len(list) > 0 {
		return list
	}
	return []T{v}
}

// name is "scheme" plus every swept value: dctcp-30k_load40_n8; traffic
// is the swept values alone (load40_n8, or "base" when only schemes vary).
func (p Point) name(s *Spec) (name, traffic string) {
	var parts []string
	w := s.Sweep
	if len(w.Load) > 0 {
		parts = append(parts, "load"+strconv.FormatFloat(p.Load*100, 'f', -1, 64))
	}
	if len(w.Senders) > 0 {
		parts = append(parts, "n"+strconv.Itoa(p.Senders))
	}
	if len(w.Flows) > 0 {
		parts = append(parts, "flows"+strconv.Itoa(p.Flows))
	}
	if len(w.Size) > 0 {
		parts = append(parts, "size"+strings.ReplaceAll(p.Size.String(), ".", "_"))
	}
	if len(w.Delay) > 0 {
		parts = append(parts, "delay"+strings.ReplaceAll(p.Delay.String(), ".", "_"))
	}
	if len(w.Workload) > 0 {
		parts = append(parts, workloadSlug(p.Workload))
	}
	traffic = strings.Join(parts, "_")
	if traffic == "" {
		return p.Scheme, "base"
	}
	return p.Scheme + "_" + traffic, traffic
}

// Label is how the report names the point's row: the scheme, plus the
// swept values other than load (which the report has a column for), so
// that points differing only in senders, flows or size are not averaged
// together: "dctcp-30k", "tcp-droptail n=4".
func (p Point) Label(s *Spec) string {
	out := p.Scheme
	w := s.Sweep
	if len(w.Senders) > 0 {
		out += " n=" + strconv.Itoa(p.Senders)
	}
	if len(w.Flows) > 0 {
		out += " flows=" + strconv.Itoa(p.Flows)
	}
	if len(w.Size) > 0 {
		out += " S=" + p.Size.String()
	}
	if len(w.Delay) > 0 {
		out += " delay=" + p.Delay.String()
	}
	if len(w.Workload) > 0 {
		out += " " + workloadSlug(p.Workload)
	}
	if p.Rate > 0 {
		out += " rate=" + p.Rate.String()
	}
	if len(p.Weights) > 0 {
		out += " weights=" + weightsText(p.Weights, ":")
	}
	return out
}

// SweepValues are the point's swept values other than the scheme, in the
// sweep's nesting order, as the report's key columns show them.
func (p Point) SweepValues(s *Spec) []report.SweepValue {
	w := s.Sweep
	var out []report.SweepValue
	add := func(swept bool, key, value string) {
		if swept {
			out = append(out, report.SweepValue{Key: key, Value: value})
		}
	}
	add(len(w.Workload) > 0, "workload", workloadSlug(p.Workload))
	add(len(w.Delay) > 0, "delay", p.Delay.String())
	add(len(w.Load) > 0, "load", strconv.FormatFloat(p.Load*100, 'f', -1, 64)+"%")
	add(len(w.Senders) > 0, "senders", strconv.Itoa(p.Senders))
	add(len(w.Flows) > 0, "flows", strconv.Itoa(p.Flows))
	add(len(w.Size) > 0, "size", p.Size.String())
	add(p.Rate > 0, "rate", p.Rate.String())
	add(len(p.Weights) > 0, "weights", weightsText(p.Weights, ":"))
	return out
}

// WorkloadOf is the flow-size distribution point p uses: the swept one,
// or the traffic's.
func (s *Spec) WorkloadOf(p Point) string {
	if p.Workload != "" {
		return p.Workload
	}
	return s.Traffic.Workload
}

// workloadSlug is a workload's short name in point names and labels: the
// file's base name without .cdf, and of Homa's workloads just "w2".."w7".
func workloadSlug(ref string) string {
	base := strings.TrimSuffix(filepath.Base(ref), ".cdf")
	if rest, ok := strings.CutPrefix(base, "homa_"); ok {
		base, _, _ = strings.Cut(rest, "_")
	}
	return base
}

// TrialSeed derives a trial's seed from the run's base seed, the point's
// traffic (Point.Traffic) and the trial number, so that every trial draws
// differently, every scheme of a trial draws the same, and a rerun with the
// same base seed draws exactly the same sizes and arrivals.
func TrialSeed(base uint64, traffic string, trial int) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%s/%d", base, traffic, trial)
	seed := h.Sum64()
	if seed == 0 { // the endpoint treats 0 as "unset"
		seed = 1
	}
	return seed
}

// weightsText is a weight vector joined by sep: "1:4", or "1-4" in names.
func weightsText(w []int, sep string) string {
	parts := make([]string, len(w))
	for i, v := range w {
		parts[i] = strconv.Itoa(v)
	}
	return strings.Join(parts, sep)
}
