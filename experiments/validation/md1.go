package validation

import (
	"fmt"
	"time"

	"github.com/fabric-emu/fabric/hosts/transport"
	"github.com/fabric-emu/fabric/hosts/transport/udp"
)

// md1Checks are validate/md1's checks of one trial: Poisson packets of
// one size into one port at load ρ, an M/D/1 queue (service time T, the
// frame's time at the port's rate). The LMM's latency is the wait in the
// port's queue plus the switch's forwarding, a floor ε that every packet
// pays; ε is the median latency of the packets that an ideal port would
// not have queued (the Lindley recursion over their arrival times at the
// switch: whether a packet finds the queue empty depends on the
// arrivals alone), and the waits are the latencies less ε.
//
// Four checks:
//   - the arrivals: the ideal M/D/1 queue's mean wait over the arrival
//     times the switch saw, against the formula. It judges the Poisson
//     senders, whatever the port does: their lateness (the sender records'
//     percentiles) matters only as far as it bends the arrival process.
//   - the mean wait, the LMM's against ρT/(2(1 − ρ)), within 10 %;
//   - the wait's distribution against Erlang's CDF: a Kolmogorov–Smirnov
//     test at the 1 % level on waits thinned to near-independence,
//     compared above the LMM's resolution δ (the spread of the idle
//     packets' latency about ε), where the formula's atom at zero (the
//     1 − ρ of packets that find the port idle) cannot be told from
//     waits shorter than δ;
//   - Little's law at the port: the backlog sampled from the qdisc's own
//     counters against the port's packet rate times the LMM's mean wait.
func md1Checks(sc *scenario, t *trial) ([]Check, error) {
	rho := t.meta.Load
	size := int64(t.meta.PointSpec.Size)
	if size == 0 {
		size = int64(sc.spec.Traffic.Size)
	}
	d := float64(size+udp.Overhead) * 8 / t.meta.BottleneckBPS // seconds
	pk, err := t.packets()
	if err != nil {
		return nil, err
	}
	if len(pk) < 100 {
		return nil, fmt.Errorf("%s: the LMM matched %d packets, want thousands", t.dir, len(pk))
	}
	w := md1WaitsOf(pk, d)
	ideal, waits, eps, delta, idle := w.ideal, w.waits, w.eps, w.delta, w.idle
	set, err := t.records()
	if err != nil {
		return nil, err
	}
	late := senderLateness(set.Senders)
	us := func(s float64) float64 { return s * 1e6 }
	theory := us(MD1MeanWait(rho, d))
	label := fmt.Sprintf("ρ = %.1f", rho)
	trace := us(mean(ideal))
	arrivals := judged(Check{Name: "M/D/1 arrivals, " + label, Unit: "µs", Theory: theory, Measured: trace, Tolerance: 0.10,
		Note: fmt.Sprintf("the ideal M/D/1 queue's mean wait over the %d arrivals the switch saw (T = %.0f µs); the senders' lateness p50 %s, p99 %s, max %s",
			len(pk), us(d), late.p50, late.p99, late.max)}, t,
		func(Check) string {
			return fmt.Sprintf("the arrivals are not the Poisson process asked for: the senders sent late (p99 %s, max %s), bunching packets, "+
				"or their host's port held them back", late.p99, late.max)
		})
	// What the port did, against the ideal queue on the same arrivals: the
	// cause of a miss when the arrivals were right.
	ratio := mean(waits) / mean(ideal)
	portCause := func(Check) string {
		switch {
		case arrivals.Verdict == Fail:
			return arrivals.Cause
		case ratio < 0.9:
			return fmt.Sprintf("the port lets queued packets go early: its mean wait is %.0f %% of an ideal queue's on the same arrivals. "+
				"HTB's bucket (tc's timerSlack at the rate, or a tenth of a frame) refills while the port idles and then passes "+
				"packets that a wire would still hold, so short queues vanish", 100*ratio)
		case ratio > 1.1:
			return fmt.Sprintf("the port serves late: its mean wait is %.0f %% of an ideal queue's on the same arrivals. HTB's dequeue waits "+
				"for its watchdog timer and a softirq, late on a busy CPU, or the LMM's captures timestamp late", 100*ratio)
		}
		return fmt.Sprintf("the shape of the waits, not their mean (%.0f %% of an ideal queue's on the same arrivals): the port's "+
			"service times vary (HTB's timer, the CPU), or the arrivals bunch (see the arrivals row)", 100*ratio)
	}
	// The port alone, against the ideal queue over the very arrivals it
	// had: a same-run reference that no sender's lateness moves.
	port := judged(Check{Name: "M/D/1 port on its arrivals, " + label, Unit: "µs", Theory: trace, Measured: us(mean(waits)), Tolerance: 0.10,
		Note: "the LMM's mean wait against the ideal M/D/1 queue's over the same arrivals"}, t, portCause)
	mw := judged(Check{Name: "M/D/1 mean wait, " + label, Unit: "µs", Theory: theory, Measured: us(mean(waits)), Tolerance: 0.10,
		Note: fmt.Sprintf("the LMM's mean latency less its floor ε = %.1f µs, the median latency of the %d packets an ideal port would not queue",
			us(eps), idle)}, t, portCause)
	lag := DecorrelationLag(waits)
	var thin []float64
	for i := 0; i < len(waits); i += lag {
		thin = append(thin, waits[i])
	}
	law := func(x float64) float64 { return MD1WaitCDF(rho, d, x) }
	ks := KSDistance(thin, law, delta)
	// A test at the 1 % level alone rejects any systematic difference once
	// there are a thousand waits, one far inside the mean's 10 %: the shape
	// is allowed what waits 10 % longer or shorter than the law's move it.
	band := max(KSScaled(thin, law, delta, 0.9), KSScaled(thin, law, delta, 1.1))
	cdf := judged(Check{Name: "M/D/1 wait CDF (KS), " + label, Theory: KSCritical(len(thin)) + band, Measured: ks, AtMost: true,
		Note: fmt.Sprintf("Kolmogorov–Smirnov distance to Erlang's CDF above δ = %.1f µs, %d waits (every %d-th): the 1 %% level's %.3f "+
			"plus %.3f, the distance waits 10 %% off the law's make", us(delta), len(thin), lag, KSCritical(len(thin)), band)}, t, portCause)
	little, err := littleCheck(t, "Little's law, M/D/1 "+label, mean(waits), fmt.Sprintf("W the LMM's latency less ε = %.1f µs", us(eps)))
	if err != nil {
		return nil, err
	}
	return []Check{arrivals, port, mw, cdf, little}, nil
}

// md1Waits are a trial's waits, seconds: the ideal queue's over the
// arrivals the switch saw, and the LMM's latencies less the floor ε (the
// median latency of the idle packets, those the ideal queue would not
// hold: idle of them), with δ, the spread of the idle packets' latency
// above ε, the LMM's resolution.
type md1Waits struct {
	ideal, waits []float64
	eps, delta   float64
	idle         int
}

func md1WaitsOf(pk []packet, d float64) md1Waits {
	at := make([]float64, len(pk))
	for i, p := range pk {
		at[i] = float64(p.In-pk[0].In) / 1e9
	}
	w := md1Waits{ideal: LindleyWaits(at, d), waits: make([]float64, len(pk))}
	var idle []float64
	for i, p := range pk {
		if w.ideal[i] == 0 {
			idle = append(idle, float64(p.Latency())/1e9)
		}
	}
	w.eps = quantile(idle, 0.5)
	w.delta = max(quantile(idle, 0.95)-w.eps, 0)
	w.idle = len(idle)
	for i, p := range pk {
		w.waits[i] = float64(p.Latency())/1e9 - w.eps
	}
	return w
}

// littleCheck is Little's law at the bottleneck port, L = λW: the
// backlog's mean over the queue sampler's samples (Poisson times, so
// their mean is the time average), against the port's packet rate over
// the samples' span (its own sent counter) times w, the LMM's mean wait
// in seconds.
func littleCheck(t *trial, name string, w float64, how string) (Check, error) {
	q, err := t.queue()
	if err != nil {
		return Check{}, err
	}
	first, last := q[0], q[len(q)-1]
	lambda := (last.sentPkts - first.sentPkts) / (float64(last.at-first.at) / 1e9)
	var backlog []float64
	for _, s := range q {
		backlog = append(backlog, s.backlogPkts)
	}
	l := mean(backlog)
	span := time.Duration(last.at - first.at)
	// The wait the backlog implies, against the LMM's: a difference of a
	// few µs is a timestamp's, and matters only when the queue is short.
	off := time.Duration((l/lambda - w) * 1e9)
	c := Check{Name: name, Unit: "pkts", Theory: lambda * w, Measured: l, Tolerance: 0.10,
		Note: fmt.Sprintf("the qdisc's backlog sampled %d times over %v (mean gap %v) against λW: λ = %.0f packets/s from its sent counter, %s",
			len(q), span.Round(time.Millisecond), (span / time.Duration(len(q))).Round(time.Microsecond), lambda, how)}
	return judged(c, t, func(c Check) string {
		if c.Measured > c.Theory {
			return fmt.Sprintf("the LMM misses %v a packet of the time it spends in the queue: a capture timestamps late at ingress "+
				"or early at egress, the floor taken off the latency is too large, or the sampler's netlink dumps hold the port up", off.Round(100*time.Nanosecond))
		}
		return fmt.Sprintf("the LMM counts %v a packet outside the queue: the switch's forwarding before the qdisc (a CPU backlog, "+
			"a busy softirq) or after it, which the qdisc's backlog does not hold", (-off).Round(100*time.Nanosecond))
	}), nil
}

// lateness is the worst of the senders' lateness percentiles.
type lateness struct{ p50, p99, max time.Duration }

func senderLateness(senders []transport.Sender) lateness {
	var l lateness
	for _, s := range senders {
		l.p50 = max(l.p50, time.Duration(s.LateP50NS))
		l.p99 = max(l.p99, time.Duration(s.LateP99NS))
		l.max = max(l.max, time.Duration(s.LateMaxNS))
	}
	return l
}
