package delay

import "time"

// histogram counts lateness with 1 µs resolution up to histMax, and keeps
// the largest value exactly: the percentiles a trial reports need no more,
// and a fixed array costs nothing per packet.
type histogram struct {
	counts [histMax / histStep]uint64
	over   uint64 // beyond histMax
	n      uint64
	max    time.Duration
}

const (
	histStep = time.Microsecond
	histMax  = 20 * time.Millisecond
)

func (h *histogram) add(d time.Duration) {
	d = max(d, 0)
	h.n++
	h.max = max(h.max, d)
	if d >= histMax {
		h.over++
		return
	}
	h.counts[d/histStep]++
}

// sub is h minus an earlier snapshot of it (the max is kept whole: a
// maximum cannot be subtracted).
func (h *histogram) sub(before *histogram) histogram {
	out := *h
	for i := range out.counts {
		out.counts[i] -= before.counts[i]
	}
	out.over -= before.over
	out.n -= before.n
	return out
}

// quantile is the q-quantile (nearest rank), rounded up to the bucket;
// values beyond histMax report as the maximum.
func (h *histogram) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q*float64(h.n-1)) + 1
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return time.Duration(i+1) * histStep
		}
	}
	return h.max
}
