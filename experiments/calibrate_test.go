package experiments

import (
	"context"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fabric-emu/fabric/emu/emutest"
	"github.com/fabric-emu/fabric/experiments/cost"
	"github.com/fabric-emu/fabric/internal/testenv"
	"github.com/fabric-emu/fabric/results/report"
)

// A short calibration measures the lab's costs and leaves nothing behind.
// The delay loop's and the pacers' figures come from their threads' exact
// CPU time and cannot be zero once they have carried packets or turned,
// nor can a hop's (it has a floor) or a node's build; the timer's p99
// cannot be below its p50. (A capture's loop is counted in 10 ms ticks,
// which a short phase's thousands of packets need not reach.)
func TestShortCalibration(t *testing.T) {
	testenv.RequireRoot(t)
	prefix := emutest.Prefix(t, "k")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	t0 := time.Now()
	p, err := Calibrate(ctx, CalibrateOptions{Short: true, LabPrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	c := p.Costs
	t.Logf("short calibration in %v: hop %.2f µs, delay line %.2f µs a packet (loop %.2f, verdict %.2f), wake-up %.2f µs, capture %.2f µs, pacer turn %.2f µs, rest %.2f %%, node %.3f s",
		time.Since(t0).Round(time.Millisecond), c.HopUS, c.DelayPacketUS, c.LoopPacketUS, c.VerdictUS, c.DelayTurnUS, c.CaptureUS, c.PacerTurnUS, c.RestPct, c.Trial.NodeS)
	if !(c.HopUS > 0 && c.LoopPacketCost() > 0 && c.VerdictUS > 0 && c.PacerTurnUS > 0 && c.DelayPacketUS >= c.LoopPacketUS+c.VerdictUS && c.CaptureUS >= 0 && c.Trial.NodeS > 0) {
		t.Errorf("a cost the lab must have is zero: %+v", c)
	}
	if len(c.Lateness) != 4 {
		t.Fatalf("lateness after %d sleeps, want 4", len(c.Lateness))
	}
	for _, l := range c.Lateness {
		if l.P99US < l.P50US || l.P50US < 0 {
			t.Errorf("after %g µs: p50 %g, p99 %g", l.SleepUS, l.P50US, l.P99US)
		}
	}
	if p.CPUs < 1 || p.Kernel == "" || time.Since(p.Date) > time.Minute || p.Costs.Transports != nil {
		t.Errorf("profile %s, transports %v: want this machine, now, and no transport in a short one", p, p.Costs.Transports)
	}
}

// A calibration under the hypervisor's steal is measured again until one
// is quiet, and at most calAttempts times, keeping the least stolen.
func TestLeastStolen(t *testing.T) {
	for _, c := range []struct {
		steals []float64
		calls  int
		want   float64
	}{
		{[]float64{0.3}, 1, 0.3},
		{[]float64{6, 1.5}, 2, 1.5},
		{[]float64{6, 3, 9}, 3, 3},
	} {
		calls := 0
		var progress strings.Builder
		p, err := leastStolen(calAttempts, &progress, func() (*cost.Profile, error) {
			p := &cost.Profile{Costs: cost.Costs{StealPct: c.steals[calls]}}
			calls++
			return p, nil
		})
		if err != nil || calls != c.calls || p.Costs.StealPct != c.want {
			t.Errorf("steals %v: %d calls, kept %v (%v), want %d calls keeping %g", c.steals, calls, p, err, c.calls, c.want)
		}
		if (c.calls > 1) != strings.Contains(progress.String(), "measuring again") {
			t.Errorf("steals %v: progress %q", c.steals, progress.String())
		}
	}
}

// solve2 splits a cost between two causes from two observations, and
// gives a cost the two cannot tell apart to one of them, never below zero.
func TestSolve2(t *testing.T) {
	a, b := solve2(100, 10, 100*3+10*50, 10, 100, 10*3+100*50)
	if math.Abs(a-3) > 1e-9 || math.Abs(b-50) > 1e-9 {
		t.Errorf("solve2 = %g, %g; want 3, 50", a, b)
	}
	if a, b := solve2(1, 1, 10, 2, 2, 20); a != 10 || b != 0 {
		t.Errorf("collinear: %g, %g; want it all on the first", a, b)
	}
	if a, b := solve2(100, 10, 100, 10, 100, 9000); a != 0 || b <= 0 {
		t.Errorf("negative first: %g, %g; want 0 and the rest on the second", a, b)
	}
}

// accountSince sums an account's samples after a moment: the machine's
// busy time (wall time × cores less idle and steal, less the other
// processes' share) and the transports'.
func TestAccountSince(t *testing.T) {
	others := uint64(20)
	a := &report.CPUAccount{CPUs: 2, TicksPerSecond: 100, Others: &others, Samples: []report.CPUSample{
		{Seconds: 1, Idle: 200},                            // before the schedule: idle
		{Seconds: 2, Idle: 150, Steal: 10, Transports: 30}, // 40 ticks busy
		{Seconds: 3, Idle: 100, Steal: 0, Transports: 60},  // 100 ticks busy
	}}
	machine, process, span := accountSince(a, 1.5)
	// 140 ticks busy, less two thirds of the 20 ticks others used over
	// three seconds: 126.67 ticks of 10 ms.
	if math.Abs(machine-(140-20*2.0/3)*1e7) > 1 || process != 90*1e7 || span != 2 {
		t.Errorf("accountSince = %g ns, %g ns, %g s; want %g, %g, 2", machine, process, span, (140-20*2.0/3)*1e7, 90e7)
	}
}

// One round spoilt by a disturbance does not set the profile's lateness:
// each sleep keeps its median round's figures.
func TestMedianLatenessIgnoresOneSpoiltRound(t *testing.T) {
	round := func(p99 ...float64) []cost.Lateness {
		var r []cost.Lateness
		for i, v := range p99 {
			r = append(r, cost.Lateness{SleepUS: float64(50 * (i + 1)), P50US: v / 10, P99US: v})
		}
		return r
	}
	got := medianLateness([][]cost.Lateness{round(30, 40), round(986, 35), round(45, 900)})
	want := round(45, 40)
	if !slices.Equal(got, want) {
		t.Errorf("medianLateness = %v, want %v", got, want)
	}
	if one := round(60, 70); !slices.Equal(medianLateness([][]cost.Lateness{one}), one) {
		t.Errorf("one round is not its own median")
	}
}
