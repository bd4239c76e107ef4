package validation

import (
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
)

// The equations the checks hold fabric to. Times are in any one unit (the
// service time D's); queues in packets.

// MD1MeanWait is the mean time an M/D/1 queue's customers wait before
// their service (the Pollaczek–Khinchine formula with a constant service
// time D): ρD / (2(1 − ρ)). Kleinrock, Queueing Systems vol. 1 (1975),
// eq. 5.76 with the service's second moment D².
func MD1MeanWait(rho, d float64) float64 { return rho * d / (2 * (1 - rho)) }

// md1Prec is MD1WaitCDF's working precision beyond what its terms need,
// bits: they alternate in sign and reach e^{2λt} (e^108 at ρ = 0.9 and
// t = 60 D) before they cancel to a probability, so float64 cannot hold
// them, and each t takes 2λt/ln 2 bits more.
const md1Prec = 128

// MD1WaitCDF is the probability that an M/D/1 customer waits at most t,
// Erlang's formula (Erlang, "The theory of probabilities and telephone
// conversations", Nyt Tidsskrift for Matematik B 20, 1909; in the form of
// Franx, "A simple solution for the M/D/c waiting time distribution",
// Operations Research Letters 29(5), 2001, eq. 1 for c = 1):
//
//	P(W ≤ t) = (1 − ρ) Σ_{k=0}^{⌊t/D⌋} e^{λ(t−kD)} (−λ(t−kD))^k / k!,  λ = ρ/D.
//
// It has an atom of 1 − ρ at t = 0 (the customers who find the server
// idle).
func MD1WaitCDF(rho, d, t float64) float64 {
	if t < 0 {
		return 0
	}
	prec := md1Prec + uint(2*rho*t/d/math.Ln2)
	f := func(v float64) *big.Float { return new(big.Float).SetPrec(prec).SetFloat64(v) }
	lambda := new(big.Float).SetPrec(prec).Quo(f(rho), f(d))
	// e^{λ(t−kD)} = e^{λt} (e^{−λD})^k: two exponentials a call.
	lt := new(big.Float).SetPrec(prec).Mul(lambda, f(t))
	e := bigExp(lt)
	shrink := new(big.Float).SetPrec(prec).Quo(f(1), bigExp(new(big.Float).SetPrec(prec).Mul(lambda, f(d))))
	sum := f(0)
	fact := f(1)
	for k := 0; float64(k)*d <= t; k++ {
		if k > 0 {
			fact.Mul(fact, f(float64(k)))
			e.Mul(e, shrink)
		}
		// kD in the working precision, not float64's: a term reaches
		// e^{2λt} (10^37 at ρ = 0.9 and 48 D), so an input rounded to
		// 10⁻¹⁶ would leave an error of 10^21 in a sum of about 1.
		x := new(big.Float).SetPrec(prec).Mul(f(float64(k)), f(d))
		x.Sub(f(t), x)
		x.Mul(x, lambda) // λ(t − kD) ≥ 0
		term := new(big.Float).SetPrec(prec).Set(e)
		for range k {
			term.Mul(term, x)
		}
		term.Quo(term, fact)
		if k%2 == 1 {
			term.Neg(term)
		}
		sum.Add(sum, term)
	}
	sum.Mul(sum, f(1-rho))
	v, _ := sum.Float64()
	return min(max(v, 0), 1)
}

// bigExp is e^x for x ≥ 0 at x's precision: the Taylor series of
// x/2^m, small enough to converge in a few dozen terms, squared m times.
func bigExp(x *big.Float) *big.Float {
	prec := x.Prec() + 64
	r := new(big.Float).SetPrec(prec).Set(x)
	m := 0
	for r.Cmp(big.NewFloat(1.0/256)) > 0 {
		r.Quo(r, big.NewFloat(2))
		m++
	}
	sum := new(big.Float).SetPrec(prec).SetInt64(1)
	term := new(big.Float).SetPrec(prec).SetInt64(1)
	eps := new(big.Float).SetPrec(prec).SetMantExp(big.NewFloat(1), -int(prec))
	for n := 1; n < 200; n++ {
		term.Mul(term, r)
		term.Quo(term, new(big.Float).SetPrec(prec).SetInt64(int64(n)))
		sum.Add(sum, term)
		if term.Cmp(eps) < 0 {
			break
		}
	}
	for range m {
		sum.Mul(sum, sum)
	}
	return sum.SetPrec(x.Prec())
}

// DCTCP's steady state with N synchronised long flows through one port of
// capacity C, round-trip time RTT and marking threshold K (Alizadeh et al.,
// "Data Center TCP (DCTCP)", SIGCOMM 2010, §3.3, eqs. 6–10), in packets:
// each window peaks at W* + 1, W* = (C·RTT + K)/N, so the queue peaks at
// Q_max = N(W* + 1) − C·RTT = K + N; the fraction of packets marked in a
// period, α, solves α²(1 − α/4) = (2W* + 1)/(W* + 1)², each window drops
// by D = (W* + 1)α/2, the queue by A = N·D, and a period lasts T_C = D
// round trips. For large W*, α ≈ √(2/W*) and A ≈ ½√(2N(C·RTT + K)), the
// paper's eq. 9; at a few packets a window (N = 8 flows, C·RTT + K = 36
// packets: W* = 4.5) that form is 13 % short of the equations it comes
// from, so the checks hold the queue to those.

// DCTCPQueueMax is Q_max = K + N.
func DCTCPQueueMax(n int, k float64) float64 { return k + float64(n) }

// DCTCPAlpha is the fraction of marked packets in the steady state with
// windows of W* packets: the root of α²(1 − α/4) = (2W* + 1)/(W* + 1)²
// in [0, 1], whose left side rises there (to 1 when W* is under one
// packet, where no root is).
func DCTCPAlpha(wStar float64) float64 {
	rhs := (2*wStar + 1) / ((wStar + 1) * (wStar + 1))
	lo, hi := 0.0, 1.0
	if hi*hi*(1-hi/4) <= rhs {
		return 1
	}
	for range 60 {
		mid := (lo + hi) / 2
		if mid*mid*(1-mid/4) < rhs {
			lo = mid
		} else {
			hi = mid
		}
	}
	return (lo + hi) / 2
}

// dctcpDrop is D = (W* + 1)α/2, each window's drop in packets.
func dctcpDrop(n int, bdp, k float64) float64 {
	w := (bdp + k) / float64(n)
	return (w + 1) * DCTCPAlpha(w) / 2
}

// DCTCPAmplitude is A = N·D.
func DCTCPAmplitude(n int, bdp, k float64) float64 { return float64(n) * dctcpDrop(n, bdp, k) }

// DCTCPAmplitudeLargeWindows is the paper's closed form for many packets
// a window, A ≈ ½√(2N(C·RTT + K)).
func DCTCPAmplitudeLargeWindows(n int, bdp, k float64) float64 {
	return 0.5 * math.Sqrt(2*float64(n)*(bdp+k))
}

// DCTCPPeriod is T_C = D, in round trips.
func DCTCPPeriod(n int, bdp, k float64) float64 { return dctcpDrop(n, bdp, k) }

// Drop-tail TCP: N long CUBIC flows through one port of capacity C
// (packets a second), round-trip time RTT and a buffer of B packets. The
// windows sum to B + C·RTT when the buffer overflows; a loss that reaches
// every flow cuts each window to β times itself, β = 0.7 (Xu, Ha, Rhee et
// al., RFC 9438 §4.6; Linux's tcp_cubic.c: 717/1024), so the queue falls
// by A = (1 − β)(B + C·RTT), to β(B + C·RTT) − C·RTT, and climbs back to
// B. Cuts that reach one flow at a time move it by A/N each. A window
// regrows along the larger of CUBIC's cubic W(t) = C_c(t − K)³ + W_max,
// K = ∛(W_max(1 − β)/C_c) seconds, C_c = 0.4 (§4.2, eq. 1–2), and its
// Reno-friendly estimate, α_c = 3(1 − β)/(1 + β) packets a round trip
// from βW_max (§4.3, eq. 4), so it is back at W_max = (B + C·RTT)/N after
// the shorter of K and W_max(1 + β)/3 round trips.

// CubicBeta is CUBIC's multiplicative decrease factor.
const CubicBeta = 0.7

// cubicC is C_c, packets/s³.
const cubicC = 0.4

// CubicAmplitude is A, the queue's fall at a cut that reaches every flow:
// (1 − β)(B + C·RTT), or B when the windows fall below C·RTT.
func CubicAmplitude(b, bdp float64) float64 { return min((1-CubicBeta)*(b+bdp), b) }

// CubicPeriod is the time between cuts, seconds, with the round trip at
// the sawtooth's mean queue; cPkts is C in packets a second.
func CubicPeriod(n int, b, bdp, cPkts float64) float64 {
	wMax := (b + bdp) / float64(n)
	k := math.Cbrt(wMax * (1 - CubicBeta) / cubicC)
	meanQueue := b - CubicAmplitude(b, bdp)/2
	rtt := (bdp + meanQueue) / cPkts
	return min(k, wMax*(1+CubicBeta)/3*rtt)
}

// The phantom queue (HULL, Alizadeh et al., NSDI 2012, §2.1) counts the
// packets its port sends, as a wire at the port's rate C would deliver
// them, into a counter drained at γC, and marks a packet that finds the
// counter above the threshold θ. Fed with Poisson packets of one size
// (frame time T at C), the wire is an M/D/1 queue of service T, and the
// counter a second queue of service T/γ behind it: a tandem. In a tandem
// of constant-time servers the order of the servers does not change when
// a customer leaves (Friedman, "Reduction methods for tandem queuing
// systems", Operations Research 13(1), 1965), so each packet's waits in
// the two, W₁ and W₂, sum to its wait W' in one M/D/1 queue of service
// T/γ fed by the same arrivals; the counter a packet finds is γC·W₂, and
//
//	P(mark) = P(W' − W₁ > θ/(γC)),
//
// where W₁ and W' are the Lindley waits (Lindley, "The theory of queues
// with a single server", Proc. Cambridge Phil. Soc. 48, 1952) of the same
// Poisson arrivals at service times T and T/γ. The joint law of the two
// has no closed form known to us, so PhantomMarkProbability draws it.

// PhantomMarkProbability is P(W' − W₁ > θ) for Poisson arrivals at load ρ
// (of the port), the counter draining at γ of the port's rate, and θ in
// packets, over n arrivals drawn from seed: with n = 10⁶ its standard
// error is under 0.1 percentage point at the loads the checks use.
func PhantomMarkProbability(rho, gamma, theta float64, n int, seed uint64) float64 {
	r := rand.New(rand.NewPCG(seed, 0x9a47))
	t := 0.0
	var arrivals []float64
	for range n {
		t += r.ExpFloat64() / rho // packets of service time 1
		arrivals = append(arrivals, t)
	}
	marks := PhantomMarks(arrivals, 1, gamma, theta)
	return float64(marks) / float64(n)
}

// PhantomMarks replays the phantom queue's rule (tc/bpf/port.bpf.c,
// phantom_update) over packets handed to the wire at times at (ascending),
// each taking service time d on a wire at the port's rate: a packet
// reaches the counter when the wire starts it, no earlier than the
// previous packet's start plus d; the counter, in packets, drains at γ/d
// a unit of time; a packet that finds it above θ is marked; then it adds
// one. It returns how many are marked.
func PhantomMarks(at []float64, d, gamma, theta float64) int {
	marks := 0
	var vq, last, free float64
	for i, a := range at {
		start := a
		if i > 0 {
			start = max(a, free)
			vq = max(0, vq-gamma*(start-last)/d)
		}
		last, free = start, start+d
		if vq > theta {
			marks++
		}
		vq++
	}
	return marks
}

// LindleyWaits are the waits of customers arriving at times at
// (ascending) at a first-come first-served queue of constant service time
// d (Lindley 1952): each starts when it arrives or when the one before it
// ends, whichever is later.
func LindleyWaits(at []float64, d float64) []float64 {
	out := make([]float64, len(at))
	free := math.Inf(-1)
	for i, a := range at {
		start := max(a, free)
		out[i] = start - a
		free = start + d
	}
	return out
}

// KSDistance is the Kolmogorov–Smirnov statistic of the sample xs against
// the CDF f, over t ≥ from only: sup |F̂(t) − F(t)| at the sample's steps
// above from, and at from itself.
func KSDistance(xs []float64, f func(float64) float64, from float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := float64(len(s))
	if n == 0 {
		return 0
	}
	below, _ := slices.BinarySearch(s, from)
	for below < len(s) && s[below] <= from {
		below++
	}
	dist := math.Abs(float64(below)/n - f(from))
	for i := below; i < len(s); i++ {
		fx := f(s[i])
		dist = max(dist, math.Abs(float64(i+1)/n-fx), math.Abs(float64(i)/n-fx))
	}
	return dist
}

// KSScaled is how far the law f moves when its values are scaled by s,
// sup |F(t) − F(t/s)| over from and the sample's values xs above it: the
// Kolmogorov–Smirnov distance that waits s times the law's make, which a
// tolerance on the mean (s = 0.9 or 1.1 for 10 %) allows the shape too.
func KSScaled(xs []float64, f func(float64) float64, from, s float64) float64 {
	dist := math.Abs(f(from) - f(from/s))
	for _, x := range xs {
		if x > from {
			dist = max(dist, math.Abs(f(x)-f(x/s)))
		}
	}
	return dist
}

// KSCritical is the Kolmogorov–Smirnov statistic that n independent
// draws from the hypothesised law exceed with probability 1 %: the
// Kolmogorov distribution's 1.628 with Stephens' correction for small n,
// 1.628 / (√n + 0.12 + 0.11/√n) (Press et al., Numerical Recipes, 3rd ed.
// 2007, §14.3.3).
func KSCritical(n int) float64 {
	s := math.Sqrt(float64(n))
	return 1.628 / (s + 0.12 + 0.11/s)
}

// DecorrelationLag is the least lag at which xs's sample autocorrelation
// falls below e⁻³ (at most len/10): waits a lag apart are close to
// independent, as the Kolmogorov–Smirnov test assumes, where consecutive
// waits of a queue are not.
func DecorrelationLag(xs []float64) int {
	n := len(xs)
	if n < 20 {
		return 1
	}
	mean := 0.0
	for _, x := range xs {
		mean += x
	}
	mean /= float64(n)
	var v float64
	for _, x := range xs {
		v += (x - mean) * (x - mean)
	}
	if v == 0 {
		return 1
	}
	for lag := 1; lag < n/10; lag++ {
		var c float64
		for i := lag; i < n; i++ {
			c += (xs[i] - mean) * (xs[i-lag] - mean)
		}
		if c/v < math.Exp(-3) {
			return lag
		}
	}
	return n / 10
}
