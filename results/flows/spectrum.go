package flows

import (
	"cmp"
	"slices"

	"github.com/fabric-emu/fabric/results/stats"
)

// SpectrumBins is how many equal-count bins the slowdown spectrum has.
const SpectrumBins = 10

// minSpectrumFlows is the fewest completed flows a spectrum is drawn from:
// fewer leave a bin's 99th percentile resting on one or two flows.
const minSpectrumFlows = 200

// SpectrumBin is one bin of the slowdown spectrum: the flows whose rank by
// size, shortest first, falls in (Lo, Hi] of the count.
type SpectrumBin struct {
	Lo      float64 `json:"lo"` // count quantiles, 0..1
	Hi      float64 `json:"hi"`
	MinSize int64   `json:"min_size"`
	MaxSize int64   `json:"max_size"`
	N       int     `json:"n"`
	P50     float64 `json:"p50"`
	P99     float64 `json:"p99"`
}

// spectrum is Homa's "slowdown spectrum" (Montazeri's thesis, Fig. 6.1):
// slowdown percentiles against message size, where the sizes are spaced by
// message count, so each bin holds the same number of messages. Flows of
// equal size may straddle a bin edge; they are ranked by id, which keeps
// the bins equal in count.
func spectrum(sizes []int64, sd []float64) []SpectrumBin {
	if len(sizes) < minSpectrumFlows {
		return nil
	}
	order := make([]int, len(sizes))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(sizes[a], sizes[b]) })
	var out []SpectrumBin
	for k := range SpectrumBins {
		lo, hi := k*len(order)/SpectrumBins, (k+1)*len(order)/SpectrumBins
		var v []float64
		for _, i := range order[lo:hi] {
			v = append(v, sd[i])
		}
		s := stats.Summarize(v)
		out = append(out, SpectrumBin{Lo: float64(k) / SpectrumBins, Hi: float64(k+1) / SpectrumBins,
			MinSize: sizes[order[lo]], MaxSize: sizes[order[hi-1]], N: len(v), P50: s.P50, P99: s.P99})
	}
	return out
}

// shortest returns the slowdowns of the shortest fraction of flows by
// count (the thesis's "shortest 50 % of messages").
func shortest(sizes []int64, sd []float64, fraction float64) []float64 {
	order := make([]int, len(sizes))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(sizes[a], sizes[b]) })
	n := int(float64(len(order)) * fraction)
	out := make([]float64, 0, n)
	for _, i := range order[:n] {
		out = append(out, sd[i])
	}
	slices.Sort(out)
	return out
}
