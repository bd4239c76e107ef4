package homa

import (
	"math"
	"slices"

	"github.com/fabric-emu/fabric/hosts/workload"
)

// Levels is how many priorities the switch ports give Homa: fabric's ports
// have at most 8 strict bands (tc), as the thesis's switches (§3.3).
const Levels = 8

// Priorities is how a host picks priority levels, identical on every host
// because all derive it from the same workload and RTTbytes (the thesis's
// receivers measure their incoming workload, §3.5.1; fabric gives every
// transport the experiment's workload instead).
type Priorities struct {
	// Unscheduled is how many of the Levels the unscheduled bytes use (the
	// highest ones); the rest are scheduled, and their count is also the
	// degree of overcommitment (§5.2: "a receiver will grant to at most one
	// message for each available scheduled priority level").
	Unscheduled int
	// Cutoffs[i] is the largest remaining size that unscheduled level i
	// (0 = highest) serves; the last level serves every larger size.
	Cutoffs []int64
}

// Scheduled is the number of scheduled levels.
func (p Priorities) Scheduled() int { return Levels - p.Unscheduled }

// Unsched is the priority of an unscheduled packet of a message with
// remaining bytes left to send: smaller remainders use higher levels, so
// a message climbs as it is sent (§3.3).
func (p Priorities) Unsched(remaining int64) uint8 {
	for i, c := range p.Cutoffs {
		if remaining <= c {
			return uint8(Levels - 1 - i)
		}
	}
	return uint8(Levels - p.Unscheduled)
}

// Sched is the priority of the rank-th shortest active scheduled message
// (rank 0: the highest scheduled level).
func (p Priorities) Sched(rank int) uint8 {
	return uint8(max(p.Scheduled()-1-rank, 0))
}

// PrioritiesFor computes the cut-offs from a workload (§3.3, §4.3): each
// unscheduled level carries an equal share of the unscheduled bytes, where
// a message of size x sends its first min(x, rttBytes) bytes unscheduled,
// in packets of payload bytes, each at the priority of the message's
// remaining size when it is sent. unsched 0 chooses the number of levels
// as the thesis does (§4.3.3): in proportion to the share of all bytes
// that are unscheduled, at least 1 and at most Levels-1.
func PrioritiesFor(cdf *workload.CDF, rttBytes int64, payload, unsched int) Priorities {
	return prioritiesOfSizes(quantileSizes(cdf), rttBytes, payload, unsched)
}

// prioritiesOfSizes is PrioritiesFor over a sample of message sizes.
func prioritiesOfSizes(sizes []int64, rttBytes int64, payload, unsched int) Priorities {
	var total, unschedBytes float64
	for _, x := range sizes {
		total += float64(x)
		unschedBytes += float64(min(x, rttBytes))
	}
	if unsched <= 0 {
		unsched = int(math.Round(Levels * unschedBytes / total))
	}
	unsched = min(max(unsched, 1), Levels-1)
	return Priorities{Unscheduled: unsched, Cutoffs: cutoffs(unschedPackets(sizes, rttBytes, payload), unsched)}
}

// quantileSizes samples the workload at evenly spaced quantiles: each
// entry stands for the same share of messages.
func quantileSizes(cdf *workload.CDF) []int64 {
	const n = 20000
	out := make([]int64, n)
	for i := range out {
		out[i] = int64(math.Ceil(cdf.Quantile((float64(i) + 0.5) / n)))
	}
	return out
}

// packetMass is how many unscheduled bytes leave while a message has a
// given remaining size.
type packetMass struct {
	remaining int64
	bytes     float64
}

// unschedPackets lists the unscheduled packets of the sampled messages by
// the remaining size at which each is sent, sorted by that size.
func unschedPackets(sizes []int64, rttBytes int64, payload int) []packetMass {
	byRemaining := map[int64]float64{}
	for _, x := range sizes {
		for off := int64(0); off < min(x, rttBytes); off += int64(payload) {
			byRemaining[x-off] += float64(min(int64(payload), x-off))
		}
	}
	out := make([]packetMass, 0, len(byRemaining))
	for r, b := range byRemaining {
		out = append(out, packetMass{r, b})
	}
	slices.SortFunc(out, func(a, b packetMass) int { return int(a.remaining - b.remaining) })
	return out
}

// cutoffs divides the unscheduled bytes into levels groups of consecutive
// remaining sizes, smallest first, each boundary where the running sum of
// bytes comes nearest its equal part (Fig. 3.7(b)); a remaining size is
// never split, so a single size that carries more than a level's share
// unbalances its neighbours.
func cutoffs(pkts []packetMass, levels int) []int64 {
	prefix := make([]float64, len(pkts)+1) // prefix[j]: bytes of the j smallest sizes
	for i, p := range pkts {
		prefix[i+1] = prefix[i] + p.bytes
	}
	total := prefix[len(pkts)]
	var out []int64
	j := 0
	for level := 1; level < levels; level++ {
		target := total * float64(level) / float64(levels)
		// Every group keeps at least one size while sizes last.
		j = min(j+1, len(pkts))
		for j < len(pkts) && math.Abs(prefix[j+1]-target) < math.Abs(prefix[j]-target) {
			j++
		}
		if j == 0 {
			out = append(out, 0)
			continue
		}
		out = append(out, pkts[j-1].remaining)
	}
	return out
}
