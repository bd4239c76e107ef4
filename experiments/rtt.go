package experiments

import (
	"context"
	"slices"
	"time"

	"github.com/fabric-emu/fabric/emu"
)

// unloadedRTT measures the round trip from src to dst in the idle lab with
// a few ICMP echoes and keeps the smallest: the ideal FCT of a flow is its
// size at the bottleneck rate plus this RTT (package flows), so it must be
// measured in the lab the flows ran in, before any traffic.
func unloadedRTT(ctx context.Context, lab *emu.Lab, src, dst string) (time.Duration, error) {
	rtts, err := lab.RTT(ctx, src, dst, 5)
	if len(rtts) == 0 {
		return 0, err
	}
	return slices.Min(rtts), nil
}
