package flows

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
)

// A tail percentile is made of a trial's rarest moments, and on a small
// machine some of those moments are the machine's: when both cores are
// busy for a few hundred milliseconds every transport, delay line and
// softirq waits at once, and the messages in flight then finish late
// together, whatever their class or port. A trial saturated in a few per
// cent of its CPU samples passes a rule on the share of samples, yet its
// 99th percentile can be made of exactly those messages. TailExposure
// measures how much of a tail was in flight during such moments.

// Interval is a stretch of time, CLOCK_REALTIME ns, as the records' times.
type Interval struct {
	StartNS int64 `json:"start_ns"`
	EndNS   int64 `json:"end_ns"`
}

// TailExposure is how much of one group's slowdown tail was in flight
// while the CPU was saturated.
type TailExposure struct {
	// Group is "all" or a traffic class.
	Group string `json:"group"`
	// Flows are the group's completed flows, and Exposed those in flight
	// during a saturated interval.
	Flows   int `json:"flows"`
	Exposed int `json:"exposed"`
	// Tail are the flows at or above the group's 99th-percentile slowdown
	// (nearest rank, as every table's p99), and TailExposed those of
	// them in flight during a saturated interval.
	Tail        int `json:"tail"`
	TailExposed int `json:"tail_exposed"`
}

// MinTail is the fewest flows a tail must have before its exposure is
// judged: below it, one message decides the share.
const MinTail = 5

// Distorted says whether the machine may have made the group's tail:
// more than a quarter of it was in flight while the CPU was saturated. A
// tail the network made has no reason to gather in those moments beyond
// the share of all flows that overlap them (Exposed/Flows, a few per cent
// in a trial the rule on samples passes, about a tenth at most). If a
// quarter of the slowest 1 % owe their place to the machine, the
// network's own p99 may be as low as the measured p98.75. Where the
// network's own bursts are what saturate the CPU, the two cannot be told
// apart, and the figure is not one to believe either.
func (e TailExposure) Distorted() bool {
	return e.Tail >= MinTail && 4*e.TailExposed > e.Tail
}

// String says it in a sentence.
func (e TailExposure) String() string {
	of := "all messages"
	if e.Group != "all" {
		of = e.Group + "'s messages"
	}
	return fmt.Sprintf("%d of the %d slowest 1 %% of %s were in flight while the CPU was saturated (%d of all %d were)",
		e.TailExposed, e.Tail, of, e.Exposed, e.Flows)
}

// TailExposures measures, for all completed flows and for each class,
// how much of the slowdown tail overlapped busy (in any order).
func (a *Analysis) TailExposures(busy []Interval) []TailExposure {
	iv := slices.Clone(busy)
	slices.SortFunc(iv, func(x, y Interval) int { return cmp.Compare(x.StartNS, y.StartNS) })
	merged := iv[:0]
	for _, x := range iv {
		if n := len(merged); n > 0 && x.StartNS <= merged[n-1].EndNS {
			merged[n-1].EndNS = max(merged[n-1].EndNS, x.EndNS)
			continue
		}
		merged = append(merged, x)
	}
	overlaps := func(s sample) bool {
		// The first interval ending at or after the flow's start.
		i := sort.Search(len(merged), func(i int) bool { return merged[i].EndNS >= s.startNS })
		return i < len(merged) && merged[i].StartNS <= s.endNS
	}
	group := func(name string, keep func(sample) bool) TailExposure {
		e := TailExposure{Group: name}
		// The group's p99 as every table computes it.
		b := a.collect(name, keep)
		if b.N == 0 {
			return e
		}
		for _, s := range a.samples {
			if !keep(s) {
				continue
			}
			e.Flows++
			hit := overlaps(s)
			if hit {
				e.Exposed++
			}
			if s.sd >= b.Slowdown.P99 {
				e.Tail++
				if hit {
					e.TailExposed++
				}
			}
		}
		return e
	}
	out := []TailExposure{group("all", func(sample) bool { return true })}
	for _, c := range a.ClassNames() {
		out = append(out, group(c, func(s sample) bool { return s.class == c }))
	}
	return out
}
