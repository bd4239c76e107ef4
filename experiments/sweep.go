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
						p.Name = p.name(s)
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

// name is "scheme" plus every swept value: dctcp-30k_load40_n8.
func (p Point) name(s *Spec) string {
	parts := []string{p.Scheme}
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
	return strings.Join(parts, "_")
}

// TrialSeed derives a trial's seed from the run's base seed, the point and
// the trial number, so that every trial draws differently but a rerun with
// the same base seed draws exactly the same sizes and arrivals.
func TrialSeed(base uint64, point string, trial int) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%s/%d", base, point, trial)
	seed := h.Sum64()
	if seed == 0 { // the endpoint treats 0 as "unset"
		seed = 1
	}
	return seed
}
