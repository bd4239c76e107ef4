package validation

import (
	"fmt"
	"time"

	"github.com/fabric-emu/fabric/experiments"
	"github.com/fabric-emu/fabric/tc"
)

// dctcpChecks are validate/dctcp's checks of one trial: N long DCTCP flows
// through one port marking at K, in steady state (the queue sampler and
// the LMM start after the warm-up), against Alizadeh et al.'s analysis
// (DCTCPQueueMax, DCTCPAmplitude), within 25 %, in full-size packets. The
// sawtooth is seen in the qdisc's backlog sampled at Poisson times a few
// hundred µs apart, a dozen samples or more in each of the model's periods
// T_C. A stretch of one period holds every phase of a sawtooth of that
// period, so its samples' maximum is the peak and their range the
// amplitude, whatever the stretch's phase; the checks take the medians
// over the trial's consecutive stretches, which a stall of the machine in
// a few of them (a queue drained while the senders could not run) does
// not move. Little's law is checked on the same trial (a TCP run), with
// the LMM's latency as it is: its forwarding floor is under 1 % of a queue
// held near K.
func dctcpChecks(sc *scenario, t *trial) ([]Check, error) {
	n := t.meta.PointSpec.Senders
	port, err := lmmPort(sc.spec, t.meta.PointSpec.Scheme)
	if err != nil {
		return nil, err
	}
	if port.ECN == nil {
		return nil, fmt.Errorf("%s: the scheme's bottleneck port does not mark at a threshold", t.dir)
	}
	frame := float64(port.MTU + 14) // a full-size segment as the qdisc counts it
	k := float64(port.ECN.Threshold) / frame
	rtt := time.Duration(t.meta.UnloadedRTTNS)
	bdp := t.meta.BottleneckBPS * rtt.Seconds() / (frame * 8)
	q, err := t.queue()
	if err != nil {
		return nil, err
	}
	period := time.Duration(DCTCPPeriod(n, bdp, k) * float64(rtt))
	peak, swing, stretches := perPeriod(q, period)
	gap := time.Duration(q[len(q)-1].at-q[0].at) / time.Duration(len(q))
	how := fmt.Sprintf("the qdisc's backlog sampled %d times, every %v on average: %d periods T_C = %v of %.0f samples; C·RTT = %.1f packets (RTT %v), K = %.1f",
		len(q), gap.Round(time.Microsecond), stretches, period.Round(10*time.Microsecond), float64(period)/float64(gap), bdp, rtt.Round(time.Microsecond), k)
	label := fmt.Sprintf("N = %d", n)
	qmax := judged(Check{Name: "DCTCP queue max, " + label, Unit: "pkts", Theory: DCTCPQueueMax(n, k), Measured: peak, Tolerance: 0.25,
		Note: "the median of each period's highest sample; " + how}, t, func(c Check) string {
		if c.Measured > c.Theory {
			return "the marker marks late, so the queue overshoots K: its counted queue (arrivals less the departures port_xmit sees) " +
				"lags the qdisc's, or bursts (slow start, a host port's HTB bucket passing a window at once) outrun the marking"
		}
		return "the windows stop short of K + N: the marker marks early (its counted queue above the qdisc's), or the senders' DCTCP " +
			"(fabric's BPF struct_ops) cuts more than α/2"
	})
	amp := judged(Check{Name: "DCTCP amplitude, " + label, Unit: "pkts", Theory: DCTCPAmplitude(n, bdp, k), Measured: swing, Tolerance: 0.25,
		Note: "the median of each period's range; " + how}, t, func(c Check) string {
		if c.Measured < c.Theory {
			return "the flows are not synchronised as the model assumes (their cuts fall at different times and partly cancel), " +
				"which grows with N, or the senders' DCTCP cuts by less than α/2"
		}
		return "the windows drop by more than DCTCP's α/2: α's estimate is off (fabric's BPF DCTCP), loss or a timeout halves them, " +
			"or the senders' bursts swing the queue"
	})
	pk, err := t.packets()
	if err != nil {
		return nil, err
	}
	var lat []float64
	for _, p := range pk {
		lat = append(lat, float64(p.Latency())/1e9)
	}
	little, err := littleCheck(t, "Little's law, DCTCP "+label, mean(lat), "W the LMM's mean latency")
	if err != nil {
		return nil, err
	}
	return []Check{qmax, amp, little}, nil
}

// lmmPort is the resolved port the scenario's LMM measures (its egress
// port) under scheme: the lab's ports with the scheme's merged in.
func lmmPort(spec *experiments.Spec, scheme string) (tc.Port, error) {
	l := spec.Measure.LMM
	if l == nil {
		return tc.Port{}, fmt.Errorf("%s measures no LMM port", spec.Name)
	}
	g, err := spec.LabSpec.Resolve()
	if err != nil {
		return tc.Port{}, err
	}
	i := g.Node(l.Switch).Iface(l.To)
	merged := *spec.LabSpec
	merged.Ports = spec.LabSpec.Ports.Merge(spec.Schemes[scheme].Ports)
	return merged.Port(i)
}

// perPeriod splits the samples into consecutive stretches of one period
// and returns the medians of their maxima and of their ranges, over the
// stretches with at least five samples, and how many there were.
func perPeriod(q []queueSample, period time.Duration) (peak, swing float64, stretches int) {
	var maxima, ranges []float64
	for i := 0; i < len(q); {
		end := q[i].at + int64(period)
		lo, hi, j := q[i].backlogPkts, q[i].backlogPkts, i
		for ; j < len(q) && q[j].at < end; j++ {
			lo, hi = min(lo, q[j].backlogPkts), max(hi, q[j].backlogPkts)
		}
		if j-i >= 5 {
			maxima, ranges = append(maxima, hi), append(ranges, hi-lo)
		}
		i = j
	}
	return quantile(maxima, 0.5), quantile(ranges, 0.5), len(maxima)
}
