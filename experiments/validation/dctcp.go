package validation

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/fabric-emu/fabric/experiments"
	"github.com/fabric-emu/fabric/tc"
)

// dctcpChecks are validate/dctcp's checks of one trial: N long DCTCP flows
// through one port marking at K, in steady state (the queue sampler and
// the LMM start after the warm-up), against Alizadeh et al.'s analysis
// (DCTCPQueueMax, DCTCPAmplitude), within 25 %, in full-size packets. The
// sawtooth is seen in the qdisc's backlog sampled at Poisson times a few
// hundred µs apart, in means over a few frame times. The period is the
// sawtooth's own (sawtoothPeriod), not the model's. A stretch of one
// period holds every phase of a sawtooth of that period, so its means'
// maximum is the peak and their range the amplitude, whatever the
// stretch's phase; the checks take the medians
// over the trial's consecutive stretches, which a stall of the machine in
// a few of them (a queue drained while the senders could not run) does
// not move. Little's law is checked on the same trial (a TCP run), with
// the LMM's latency as it is: its forwarding floor is under 1 % of a queue
// held near K.
func dctcpChecks(sc *scenario, t *trial) ([]Check, error) {
	lt, err := openLongFlows(sc, t)
	if err != nil {
		return nil, err
	}
	if lt.port.ECN == nil {
		return nil, fmt.Errorf("%s: the scheme's bottleneck port does not mark at a threshold", t.dir)
	}
	n, bdp, rtt := lt.n, lt.bdp, lt.rtt
	k := float64(lt.port.ECN.Threshold) / lt.frame
	model := time.Duration(DCTCPPeriod(n, bdp, k) * float64(rtt))
	saw := seeSawtooth(lt.q, lt.frame, t.meta.BottleneckBPS, model)
	how := fmt.Sprintf("%s (the model's T_C = %v in unloaded round trips); C·RTT = %.1f packets (RTT %v), K = %.1f",
		saw, model.Round(100*time.Microsecond), bdp, rtt.Round(time.Microsecond), k)
	label := fmt.Sprintf("N = %d", n)
	qmax := judged(Check{Name: "DCTCP queue max, " + label, Unit: "pkts", Theory: DCTCPQueueMax(n, k), Measured: saw.peak, Tolerance: 0.25,
		Note: "the median of each period's highest mean; " + how}, t, func(c Check) string {
		if c.Measured > c.Theory {
			return "the marker marks late, so the queue overshoots K: its counted queue (arrivals less the departures port_xmit sees) " +
				"lags the qdisc's, or bursts (slow start, a host port's HTB bucket passing a window at once) outrun the marking"
		}
		return "the windows stop short of K + N: the marker marks early (its counted queue above the qdisc's), or the senders' DCTCP " +
			"(fabric's BPF struct_ops) cuts more than α/2"
	})
	amp := judged(Check{Name: "DCTCP amplitude, " + label, Unit: "pkts", Theory: DCTCPAmplitude(n, bdp, k), Measured: saw.swing, Tolerance: 0.25,
		Note: fmt.Sprintf("the median of each period's range, against N·(W* + 1)α/2 (the large-window form ½√(2N(C·RTT + K)) gives %.1f); %s",
			DCTCPAmplitudeLargeWindows(n, bdp, k), how)}, t, func(c Check) string {
		if c.Measured < c.Theory {
			return "the flows are not synchronised as the model assumes (their cuts fall at different times and partly cancel), " +
				"which grows with N, or the senders' DCTCP cuts by less than α/2"
		}
		return "the windows drop by more than DCTCP's α/2: α's estimate is off (fabric's BPF DCTCP), loss or a timeout halves them, " +
			"or the senders' bursts swing the queue"
	})
	return withLittle(t, "Little's law, DCTCP "+label, qmax, amp)
}

// longFlows is what the checks of long flows through the LMM's port read
// of a trial: the flows, the port, a full-size segment as the qdisc counts
// it (frame bytes), C·RTT in those frames, and the sampled backlog.
type longFlows struct {
	n          int
	port       tc.Port
	frame, bdp float64
	rtt        time.Duration
	q          []queueSample
}

func openLongFlows(sc *scenario, t *trial) (*longFlows, error) {
	port, err := lmmPort(sc.spec, t.meta.PointSpec.Scheme)
	if err != nil {
		return nil, err
	}
	q, err := t.queue()
	if err != nil {
		return nil, err
	}
	lt := &longFlows{n: t.meta.PointSpec.Senders, port: port, frame: float64(port.MTU + 14), rtt: time.Duration(t.meta.UnloadedRTTNS), q: q}
	lt.bdp = t.meta.BottleneckBPS * lt.rtt.Seconds() / (lt.frame * 8)
	return lt, nil
}

// withLittle appends to checks Little's law at the LMM's port, with W the
// LMM's mean latency as it is.
func withLittle(t *trial, name string, checks ...Check) ([]Check, error) {
	pk, err := t.packets()
	if err != nil {
		return nil, err
	}
	var lat []float64
	for _, p := range pk {
		lat = append(lat, float64(p.Latency())/1e9)
	}
	little, err := littleCheck(t, name, mean(lat), "W the LMM's mean latency")
	if err != nil {
		return nil, err
	}
	return append(checks, little), nil
}

// sawtooth is a queue's sawtooth as the backlog samples show it: the
// medians, over stretches of its own period, of each stretch's highest
// mean (peak) and range (swing), in packets.
type sawtooth struct {
	peak, swing float64
	stretches   int
	period      time.Duration
	seen        bool // false: the backlog showed no period, and the model's was used
	samples     int
	gap, bin    time.Duration
}

// seeSawtooth finds q's sawtooth near the model's period. The analyses'
// queues are fluids; the sampled backlog adds a packet or two as single
// packets come and go, which a mean over smoothFrames frame times (frame
// bytes at bps) takes out.
func seeSawtooth(q []queueSample, frame, bps float64, model time.Duration) sawtooth {
	bin := int64(smoothFrames * frame * 8 / bps * 1e9)
	x := binnedBacklog(q, bin)
	periodBins, seen := sawtoothPeriod(x, float64(model)/float64(bin))
	s := sawtooth{period: time.Duration(int64(periodBins) * bin), seen: seen, samples: len(q),
		gap: time.Duration(q[len(q)-1].at-q[0].at) / time.Duration(len(q)), bin: time.Duration(bin)}
	s.peak, s.swing, s.stretches = perPeriod(x, periodBins)
	return s
}

// String says how the sawtooth was measured, for a check's note.
func (s sawtooth) String() string {
	whence := "the backlog's own period (its autocorrelation's first high peak)"
	if !s.seen {
		whence = "the model's period (the backlog showed none of its own)"
	}
	return fmt.Sprintf("the qdisc's backlog sampled %d times, every %v on average, in means over %d frame times (%v): %d stretches of %s, %v",
		s.samples, s.gap.Round(time.Microsecond), smoothFrames, s.bin.Round(10*time.Microsecond), s.stretches, whence, s.period.Round(time.Millisecond))
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

// smoothFrames is how many frame times a mean of the backlog spans.
const smoothFrames = 4

// sawtoothPeriod is the period, in x's bins, of the backlog's sawtooth
// (x, means per bin): the lag of the first peak of the autocorrelation
// past its first trough that comes within a fifth of the highest, on x
// less its moving mean over 40 model periods (the level can step, as it
// did with four and eight flows), for lags up to 20 model periods or a
// quarter of the span. The model counts its period in unloaded round
// trips, but a queue near K lengthens every round trip by K/C (at
// C·RTT ≈ K, twice), and each cut spends a round trip in CWR without
// growth: a stretch of the model's length then holds part of a cycle
// only, and its range is not the amplitude. seen is false, and the period
// the model's, when the autocorrelation has no such peak.
func sawtoothPeriod(x []float64, model float64) (bins int, seen bool) {
	fallback := max(int(math.Round(model)), 1)
	lag := firstPeak(autocorrelation(detrended(x, int(40*model)), min(len(x)/4, int(20*model))))
	if lag == 0 {
		return fallback, false
	}
	return lag, true
}

// binnedBacklog is the mean backlog (packets) over each bin ns from the
// first sample; a bin without a sample keeps the last level.
func binnedBacklog(q []queueSample, bin int64) []float64 {
	n := int((q[len(q)-1].at-q[0].at)/bin) + 1
	sum, cnt := make([]float64, n), make([]float64, n)
	for _, s := range q {
		i := int((s.at - q[0].at) / bin)
		sum[i] += s.backlogPkts
		cnt[i]++
	}
	x := make([]float64, n)
	for i := range x {
		switch {
		case cnt[i] > 0:
			x[i] = sum[i] / cnt[i]
		case i > 0:
			x[i] = x[i-1]
		}
	}
	return x
}

// autocorrelation is x's (of mean zero) for lags below lags; all zero
// for a constant x.
func autocorrelation(x []float64, lags int) []float64 {
	c := make([]float64, max(lags, 0))
	var v float64
	for _, e := range x {
		v += e * e
	}
	if v == 0 {
		return c
	}
	for lag := 1; lag < lags; lag++ {
		var sum float64
		for i := 0; i+lag < len(x); i++ {
			sum += x[i] * x[i+lag]
		}
		c[lag] = sum / float64(len(x)-lag) / (v / float64(len(x)))
	}
	return c
}

// firstPeak is the lag of the first local maximum of c past its first
// trough that comes within a fifth of c's highest there (a sawtooth's
// multiples of its period correlate almost as well, and noise may rank
// one first); 0 when there is none above zero.
func firstPeak(c []float64) int {
	trough := 0
	for lag := 2; lag < len(c) && trough == 0; lag++ {
		if c[lag] > c[lag-1] {
			trough = lag - 1
		}
	}
	if trough == 0 {
		return 0
	}
	best := 0.0
	for _, v := range c[trough+1:] {
		best = max(best, v)
	}
	for lag := trough + 1; best > 0 && lag < len(c)-1; lag++ {
		if c[lag] >= 0.8*best && c[lag] >= c[lag-1] && c[lag] >= c[lag+1] {
			return lag
		}
	}
	return 0
}

// detrended is x less its centred moving mean over width values.
func detrended(x []float64, width int) []float64 {
	prefix := make([]float64, len(x)+1)
	for i, v := range x {
		prefix[i+1] = prefix[i] + v
	}
	out := make([]float64, len(x))
	for i := range x {
		lo, hi := max(i-width/2, 0), min(i+width/2+1, len(x))
		out[i] = x[i] - (prefix[hi]-prefix[lo])/float64(hi-lo)
	}
	return out
}

// perPeriod splits the series into consecutive stretches of period
// values and returns the medians of their maxima and of their ranges,
// over the stretches of at least five values, and how many there were.
func perPeriod(x []float64, period int) (peak, swing float64, stretches int) {
	var maxima, ranges []float64
	for i := 0; i+max(period, 5) <= len(x); i += period {
		seg := x[i : i+period]
		lo, hi := slices.Min(seg), slices.Max(seg)
		maxima, ranges = append(maxima, hi), append(ranges, hi-lo)
	}
	return quantile(maxima, 0.5), quantile(ranges, 0.5), len(maxima)
}
