package experiments

import (
	"context"

	"github.com/fabric-emu/fabric/emu"
	"github.com/fabric-emu/fabric/results/report"
	"github.com/fabric-emu/fabric/tc"
)

// ndpTargets are every switch port of lab when its ports run NDP mode
// anywhere (ports, a tier or an override), else none.
func ndpTargets(lab *emu.Lab) []tc.Target {
	p := lab.Spec.Ports
	trims := p.NDP != nil
	for _, s := range p.Tiers {
		trims = trims || s.NDP != nil
	}
	for _, s := range p.Overrides {
		trims = trims || s.NDP != nil
	}
	if !trims {
		return nil
	}
	var out []tc.Target
	for _, sw := range lab.Graph.Switches() {
		for _, i := range sw.Ifaces {
			if t, err := lab.PortTarget(sw.Name, i.Name); err == nil {
				out = append(out, t)
			}
		}
	}
	return out
}

// readNDP reads the NDP counters of targets, by port; ports that are not
// NDP ports or cannot be read are left out.
func readNDP(ctx context.Context, targets []tc.Target) map[tc.Target]tc.NDPStats {
	out := map[tc.Target]tc.NDPStats{}
	for _, t := range targets {
		if st, err := tc.Stats(ctx, t); err == nil && st.NDP != nil {
			out[t] = *st.NDP
		}
	}
	return out
}

// ndpFidelity is what the ports counted between two readings, or nil when
// the lab has no NDP ports.
func ndpFidelity(before, after map[tc.Target]tc.NDPStats) *report.NDPFidelity {
	if len(after) == 0 {
		return nil
	}
	f := &report.NDPFidelity{Ports: len(after)}
	for t, a := range after {
		b := before[t] // zero when the first reading missed it
		f.Trimmed += a.Trimmed - b.Trimmed
		f.HeaderDrops += a.HeaderDrops - b.HeaderDrops
		f.DataDrops += a.DataDrops - b.DataDrops
		f.DataQueueMax = max(f.DataQueueMax, a.DataQueueMax)
	}
	return f
}
