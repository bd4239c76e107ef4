package homa

import (
	"math"
	"strings"
	"testing"

	"github.com/fabric-emu/fabric/hosts/workload"
)

// levelBytes sends each sampled message's unscheduled bytes packet by
// packet, as the sender does, and sums the bytes each unscheduled level
// carries (index 0 = the highest level).
func levelBytes(p Priorities, sizes []int64, rttBytes int64, payload int) []float64 {
	out := make([]float64, p.Unscheduled)
	for _, x := range sizes {
		u := min(x, rttBytes)
		for off := int64(0); off < u; off += int64(payload) {
			n := min(int64(payload), x-off)
			out[Levels-1-int(p.Unsched(x-off))] += float64(n)
		}
	}
	return out
}

// The cut-offs computed from each shipped Homa workload give every
// unscheduled level about the same share of the unscheduled bytes (thesis
// §3.3/§4.3), within 10 % of an equal share, where the workload's sizes
// allow it, on messages drawn from the workload.
func TestCutoffsAreBytesBalanced(t *testing.T) {
	const payload = 1500 - 20 - 8 - HeaderLen
	// RTTbytes of a 100 Mbit/s lab with a 1 ms RTT, the scheduled rate of
	// fabric's Homa scenarios.
	const rttBytes = 12500
	for _, name := range workload.Builtins() {
		if !strings.HasPrefix(name, "homa_w") {
			continue
		}
		cdf, err := workload.Open(name, nil)
		if err != nil {
			t.Fatal(err)
		}
		// The balance is checked on messages drawn at random, not on the
		// quantile sample the cut-offs were computed from.
		rng := cdf.NewSampler(7)
		sizes := make([]int64, 200000)
		for i := range sizes {
			sizes[i] = rng.Next()
		}
		for _, levels := range []int{0, 2, 4} {
			p := PrioritiesFor(cdf, rttBytes, payload, levels)
			b := levelBytes(p, sizes, rttBytes, payload)
			var total float64
			for _, v := range b {
				total += v
			}
			fair := total / float64(len(b))
			worst := 0.0
			for _, v := range b {
				worst = max(worst, math.Abs(v-fair)/fair)
			}
			t.Logf("%s levels=%d (asked %d): cutoffs %v shares %.3v worst %.1f%%", name, p.Unscheduled, levels, p.Cutoffs, shares(b, total), worst*100)
			if worst > 0.10 {
				t.Errorf("%s with %d unscheduled levels: a level's bytes are %.0f%% off an equal share", name, p.Unscheduled, worst*100)
			}
		}
	}
}

func shares(b []float64, total float64) []float64 {
	out := make([]float64, len(b))
	for i, v := range b {
		out[i] = v / total
	}
	return out
}
