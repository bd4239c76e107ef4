package validation

import (
	"fmt"
	"time"
)

// droptailChecks are validate/droptail's checks of one trial: N long
// CUBIC flows through one drop-tail port, in steady state, against the
// sawtooth of synchronised cuts (CubicAmplitude): the queue peaks at the
// buffer and falls by (1 − β)(B + C·RTT). The sawtooth is seen as
// dctcpChecks sees DCTCP's: the qdisc's backlog in means over a few frame
// times, cut into stretches of its own period, medians of their maxima and
// ranges. These are the packet counts a paper-scale port would hold
// (the scaling rule keeps bytes); the period is not, as CUBIC's cubic
// growth runs on the clock, not on round trips. Little's law is checked
// on the same trial.
func droptailChecks(sc *scenario, t *trial) ([]Check, error) {
	n := t.meta.PointSpec.Senders
	port, err := lmmPort(sc.spec, t.meta.PointSpec.Scheme)
	if err != nil {
		return nil, err
	}
	if port.ECN != nil || port.Phantom != nil {
		return nil, fmt.Errorf("%s: the scheme's bottleneck port marks; a drop-tail check wants one that only drops", t.dir)
	}
	frame := float64(port.MTU + 14)
	b := float64(int(float64(port.Buffer.BytesAt(port.MTU)) / frame)) // whole frames fit
	rtt := time.Duration(t.meta.UnloadedRTTNS)
	bdp := t.meta.BottleneckBPS * rtt.Seconds() / (frame * 8)
	q, err := t.queue()
	if err != nil {
		return nil, err
	}
	model := time.Duration(CubicPeriod(n, b, bdp, t.meta.BottleneckBPS/(frame*8)) * 1e9)
	saw := seeSawtooth(q, frame, t.meta.BottleneckBPS, model)
	peak, swing := saw.peak, saw.swing
	how := fmt.Sprintf("%s (the model's %v); B = %.0f packets, C·RTT = %.1f (RTT %v)",
		saw, model.Round(time.Millisecond), b, bdp, rtt.Round(time.Microsecond))
	label := fmt.Sprintf("CUBIC N = %d", n)
	qmax := judged(Check{Name: "drop-tail queue max, " + label, Unit: "pkts", Theory: b, Measured: peak, Tolerance: 0.10,
		Note: "the median of each period's highest mean, against the buffer; " + how}, t, func(c Check) string {
		if c.Measured > c.Theory {
			return "the port holds more than its buffer: the bfifo's byte limit is not the spec's, or it counts frames shorter than a full one"
		}
		return "the windows stop short of filling the buffer: something else limits the senders (a receive window, a host's own queue " +
			"or TCP small queues), or the port drops before it is full"
	})
	amp := judged(Check{Name: "CUBIC amplitude, " + label, Unit: "pkts", Theory: CubicAmplitude(b, bdp), Measured: swing, Tolerance: 0.25,
		Note: fmt.Sprintf("the median of each period's range, against (1 − β)(B + C·RTT), β = %.1f; a cut reaching one flow of %d moves it by %.1f; %s",
			CubicBeta, n, CubicAmplitude(b, bdp)/float64(n), how)}, t, func(c Check) string {
		if c.Measured < c.Theory {
			return "the flows' cuts are not synchronised (each cut moves the queue by A/N), or the senders cut by less than CUBIC's β " +
				"(another congestion control)"
		}
		return "the windows fall by more than 1 − β: retransmission timeouts, or several cuts in one recovery as losses spread over " +
			"round trips"
	})
	little, err := lmmLittleCheck(t, "Little's law, "+label)
	if err != nil {
		return nil, err
	}
	return []Check{qmax, amp, little}, nil
}
