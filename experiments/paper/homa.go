package paper

import (
	"fmt"

	"github.com/fabric-emu/fabric/results/report"
)

// The Homa claims come from Montazeri's thesis ("Homa: A Receiver-Driven
// Low-Latency Transport Protocol Using Network Priorities", Stanford,
// 2019) and from fabric's own targets for a userspace Homa on this
// machine (docs/homa.md), which are marked "target".
const thesis = "Montazeri's thesis"

// homaWorkloads are the workloads homa/slowdown runs, by the point label's
// suffix (experiments.workloadSlug).
var homaWorkloads = []string{"w2", "w3", "w4", "w5"}

func homaSlowdownClaims() []Claim {
	var out []Claim
	for _, w := range homaWorkloads {
		homa := rowValue("homa", w, 0.8, shortP99)
		out = append(out,
			Claim{Label: fmt.Sprintf("%s, 80%%: Homa's p99 slowdown, shortest 50%% of messages", w),
				Source: thesis + " §6.1 (\"never worse than 2.2 at 80% network load\", simulated)", Of: homa, AtMost: 2.2},
			Claim{Label: fmt.Sprintf("%s, 80%%: the same, fabric's target", w), Source: "target", Of: homa, AtMost: 3},
			Claim{Label: fmt.Sprintf("%s, 80%%: cubic's p99 slowdown, shortest 50%%, over Homa's", w), Source: "target",
				Of: rowValue("tcp-cubic", w, 0.8, shortP99), Over: homa, AtLeast: 5},
		)
	}
	return out
}

func homaPriorityClaims() []Claim {
	var out []Claim
	for _, w := range []string{"w2", "w4"} {
		level := func(n int) func([]report.Row) float64 {
			return rowValue(fmt.Sprintf("homa-unsched%d", n), w, 0.8, shortP99)
		}
		out = append(out, Claim{Label: fmt.Sprintf("%s: one unscheduled level's p99 slowdown (shortest 50%%) over four levels'", w),
			Source: thesis + " Fig. 4.9, 6.7 (one level is not enough)", Of: level(1), Over: level(4), AtLeast: 1.1})
		for _, pair := range [][2]int{{1, 2}, {2, 4}, {4, 7}} {
			// "Never worse" within the noise of one run: 10 %.
			out = append(out, Claim{Label: fmt.Sprintf("%s: %d levels' p99 slowdown (shortest 50%%) over %d levels'", w, pair[1], pair[0]),
				Source: "target (more levels never worse, within 10 %)", Of: level(pair[1]), Over: level(pair[0]), AtMost: 1.1})
		}
	}
	return out
}

func homaPacerClaims() []Claim {
	// homa/pacer loads one sender at 80 % of its link, spread over 15
	// receivers, so its rows carry each receiver's share of that load.
	return []Claim{{Label: "w4, one sender at 80%: p99 slowdown (shortest 50%) without the pacer over with it",
		Source: thesis + " Fig. 6.5, §6.4 (8-20x on workloads other than W7); target ≥ 3",
		Of:     rowValue("homa-no-pacer", "", anyLoad, shortP99), Over: rowValue("homa-pacer", "", anyLoad, shortP99), AtLeast: 3}}
}
