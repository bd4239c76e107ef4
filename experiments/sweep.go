package experiments

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"

	"fabric/internal/units"
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
	schemes := []string(s.Sweep.Scheme)
	if len(schemes) == 0 || len(schemes) == 1 && schemes[0] == "all" {
		schemes = s.SchemeOrder
	}
	t := s.Traffic
	loads := orOne(s.Sweep.Load, t.Load)
	senders := orOne(s.Sweep.Senders, t.Senders)
	flows := orOne(s.Sweep.Flows, t.Flows)
	sizes := orOne(s.Sweep.Size, t.Size)
	var out []Point
	for _, l := range loads {
		for _, n := range senders {
			for _, fl := range flows {
				for _, sz := range sizes {
					for _, sc := range schemes {
						p := Point{Index: len(out), Scheme: sc, Load: l, Senders: n, Flows: fl, Size: sz}
						p.Name, p.Traffic = p.name(s)
						out = append(out, p)
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
	return out
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
