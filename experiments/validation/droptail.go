package validation

import (
	"fmt"
	"math"
	"time"
)

// droptailChecks are validate/droptail's checks of one trial: long CUBIC
// flows through one drop-tail port, in steady state, against the sawtooth
// of cuts that reach every flow (CubicAmplitude; with one flow, every cut
// does): the queue peaks at the buffer and falls by (1 − β)(B + C·RTT).
// The sawtooth is seen as dctcpChecks sees DCTCP's (seeSawtooth). These
// are the packet counts a paper-scale port would hold (the scaling rule
// keeps bytes); the period is not, as CUBIC's cubic growth runs on the
// clock, not on round trips. Little's law is checked on the same trial.
func droptailChecks(sc *scenario, t *trial) ([]Check, error) {
	lt, err := openLongFlows(sc, t)
	if err != nil {
		return nil, err
	}
	if lt.port.ECN != nil || lt.port.Phantom != nil {
		return nil, fmt.Errorf("%s: the scheme's bottleneck port marks; a drop-tail check wants one that only drops", t.dir)
	}
	n, frame, bdp := lt.n, lt.frame, lt.bdp
	b := math.Floor(float64(lt.port.Buffer.BytesAt(lt.port.MTU)) / frame) // whole frames fit
	model := time.Duration(CubicPeriod(n, b, bdp, t.meta.BottleneckBPS/(frame*8)) * 1e9)
	saw := seeSawtooth(lt.q, frame, t.meta.BottleneckBPS, model)
	how := fmt.Sprintf("%s (the model's %v); B = %.0f packets, C·RTT = %.1f (RTT %v)",
		saw, model.Round(time.Millisecond), b, bdp, lt.rtt.Round(time.Microsecond))
	label := fmt.Sprintf("CUBIC N = %d", n)
	qmax := judged(Check{Name: "drop-tail queue max, " + label, Unit: "pkts", Theory: b, Measured: saw.peak, Tolerance: 0.10,
		Note: "the median of each period's highest mean, against the buffer; " + how}, t, func(c Check) string {
		if c.Measured > c.Theory {
			return "the port holds more than its buffer: the bfifo's byte limit is not the spec's, or it counts frames shorter than a full one"
		}
		return "the windows stop short of filling the buffer: something else limits the senders (a receive window, a host's own queue " +
			"or TCP small queues), or the port drops before it is full"
	})
	amp := judged(Check{Name: "CUBIC amplitude, " + label, Unit: "pkts", Theory: CubicAmplitude(b, bdp), Measured: saw.swing, Tolerance: 0.25,
		Note: fmt.Sprintf("the median of each period's range, against (1 − β)(B + C·RTT), β = %.1f; a cut reaching one flow of %d moves it by %.1f; %s",
			CubicBeta, n, CubicAmplitude(b, bdp)/float64(n), how)}, t, func(c Check) string {
		if c.Measured < c.Theory {
			return "the flows' cuts are not synchronised (each cut moves the queue by A/N), or the senders cut by less than CUBIC's β " +
				"(another congestion control)"
		}
		return "the windows fall by more than 1 − β: retransmission timeouts, or several cuts in one recovery as losses spread over " +
			"round trips"
	})
	return withLittle(t, "Little's law, "+label, qmax, amp)
}
