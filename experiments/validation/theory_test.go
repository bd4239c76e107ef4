package validation

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func near(t *testing.T, what string, got, want, tol float64) {
	t.Helper()
	if math.Abs(got-want) > tol {
		t.Errorf("%s = %.12g, want %.12g ± %.2g", what, got, want, tol)
	}
}

// The M/D/1 mean wait by hand: ρD/(2(1 − ρ)) is 0.5 D at ρ = 0.5 and
// 4.5 D at 0.9; 363.4 µs for validate/md1's quick point (ρ = 0.6, a
// 1514-byte frame at 25 Mbit/s: D = 484.48 µs).
func TestMD1MeanWait(t *testing.T) {
	near(t, "W(0.5)", MD1MeanWait(0.5, 1), 0.5, 1e-12)
	near(t, "W(0.9)", MD1MeanWait(0.9, 1), 4.5, 1e-12)
	near(t, "W(0.6, 484.48 µs)", MD1MeanWait(0.6, 484.48), 363.36, 1e-9)
}

// Erlang's CDF by hand at ρ = 0.5, D = 1 (λ = 0.5):
//
//	F(0)   = 1 − ρ                               = 0.5
//	F(0.5) = 0.5 e^0.25                          = 0.6420127
//	F(1)   = 0.5 (e^0.5 − 0)                     = 0.8243606
//	F(1.5) = 0.5 (e^0.75 − 0.25 e^0.25)          = 0.8979968
//	F(2)   = 0.5 (e^1 − 0.5 e^0.5 + 0)           = 0.9469606
//
// and its mean, ∫(1 − F), is the Pollaczek–Khinchine mean at ρ = 0.9,
// where the sum's terms reach e^50 before they cancel.
func TestMD1WaitCDF(t *testing.T) {
	for _, c := range []struct{ t, want float64 }{
		{0, 0.5}, {0.5, 0.6420127}, {1, 0.8243606}, {1.5, 0.8979968}, {2, 0.9469606}, {-1, 0},
	} {
		near(t, "F", MD1WaitCDF(0.5, 1, c.t), c.want, 1e-7)
	}
	mean, dt := 0.0, 0.02
	for x := dt / 2; x < 60; x += dt {
		mean += (1 - MD1WaitCDF(0.9, 1, x)) * dt
	}
	near(t, "∫(1 − F) at ρ = 0.9", mean, 4.5, 1e-3)
}

// Erlang's formula depends on t and D through t/D alone, so the
// validation's own frame time (1514 bytes at 10 Mbit/s, in seconds, where
// kD is not exact in float64) gives what D = 1 gives, and stays a
// distribution function at ρ = 0.9 out to 200 D, where its terms reach
// e^{360} before they cancel.
func TestMD1WaitCDFAtTheScenariosFrameTime(t *testing.T) {
	d := 1514.0 * 8 / 10e6
	prev := 0.0
	for m := 0.25; m <= 200; m += 0.25 {
		f := MD1WaitCDF(0.9, d, m*d)
		near(t, fmt.Sprintf("F(%.2f D)", m), f, MD1WaitCDF(0.9, 1, m), 1e-9)
		if f < prev || f > 1 {
			t.Fatalf("F(%.2f D) = %v after %v: not a distribution function", m, f, prev)
		}
		prev = f
	}
	near(t, "F(200 D)", prev, 1, 1e-12)
}

// DCTCP's steady state (Alizadeh et al. §3.3), its equations solved by
// hand (bisection of α²(1 − α/4) = (2W* + 1)/(W* + 1)², then
// D = (W* + 1)α/2, A = N·D): with C·RTT + K = 16 packets and N = 8,
// W* = 2, α = 0.838376, A = 10.0605 over a period of 1.2576 RTTs, where
// the large-window form gives 8 over 1; with 25 and N = 2, A = 5.3734
// (5); the validation's N = 8 (36.3 packets) is 13.82 against 12.05. At
// 10⁵ packets and N = 2 the forms agree within 0.1 %. The queue peaks at
// K + N.
func TestDCTCPSteadyState(t *testing.T) {
	for _, w := range []float64{1.5, 2, 4.5, 18, 1e4} {
		a := DCTCPAlpha(w)
		near(t, fmt.Sprintf("α(%v)'s residual", w), a*a*(1-a/4), (2*w+1)/((w+1)*(w+1)), 1e-12)
	}
	near(t, "α(2)", DCTCPAlpha(2), 0.838376, 1e-6)
	near(t, "A(8, 16)", DCTCPAmplitude(8, 6, 10), 10.0605, 1e-4)
	near(t, "T_C(8, 16)", DCTCPPeriod(8, 6, 10), 1.2576, 1e-4)
	near(t, "A(2, 25)", DCTCPAmplitude(2, 5, 20), 5.3734, 1e-4)
	near(t, "A(8, 36.3)", DCTCPAmplitude(8, 16.5, 19.8), 13.820, 1e-3)
	near(t, "large-window A(8, 16)", DCTCPAmplitudeLargeWindows(8, 6, 10), 8, 1e-12)
	near(t, "A/A_large at 10⁵", DCTCPAmplitude(2, 5e4, 5e4)/DCTCPAmplitudeLargeWindows(2, 5e4, 5e4), 1, 1e-3)
	near(t, "α under a packet a window", DCTCPAlpha(0.2), 1, 0)
	near(t, "Q_max(8, 19.8)", DCTCPQueueMax(8, 19.8), 27.8, 1e-12)
}

// CUBIC's sawtooth by hand. validate/droptail's lab: B = 33 frames of
// 1514 bytes, C·RTT = 10 Mbit/s × 20 ms = 16.51 frames, so A = 0.3 ×
// 49.51 = 14.85 frames; one window peaks at 49.51, K = ∛(49.51 × 0.3/0.4)
// = 3.34 s, and the Reno-friendly window is back in 49.51 × 1.7/3 = 28.06
// round trips of (16.51 + 25.57)/825.6 s = 50.97 ms: 1.430 s, the
// shorter; two windows of half that are back in 0.715 s. HULL Table 1's
// port (700 KB, 1 Gbit/s, 200 µs): A = 143.66 frames, the queue's floor
// 318.69 frames (3.86 ms). A buffer smaller than the windows' fall
// empties.
func TestCubicSawtooth(t *testing.T) {
	bdp := 10e6 * 0.02 / (1514 * 8)
	near(t, "A(33, 16.51)", CubicAmplitude(33, bdp), 14.8538, 1e-4)
	near(t, "period(1, 33, 16.51)", CubicPeriod(1, 33, bdp, 10e6/(1514*8)), 1.43019, 1e-5)
	near(t, "period(2, 33, 16.51)", CubicPeriod(2, 33, bdp, 10e6/(1514*8)), 0.71509, 1e-5)
	b := 700e3 / 1514
	near(t, "A at HULL's Table 1", CubicAmplitude(b, 16.5125), 143.659, 1e-3)
	near(t, "the floor at HULL's Table 1", b-CubicAmplitude(b, 16.5125), 318.692, 1e-3)
	near(t, "A of a shallow buffer", CubicAmplitude(2, 100), 2, 0)
}

// A sawtooth five times as long as the model's period, 8 packets from
// trough to peak, sampled at Poisson times 250 µs apart for 18 s, with its
// level stepping up by 20 packets half-way (as four flows' queue did):
// the period found is the sawtooth's own, and a stretch of it holds the
// whole swing, where a stretch of the model's period holds a fifth.
func TestSawtoothPeriodIsTheBacklogsOwn(t *testing.T) {
	const model = 40 * time.Millisecond
	period := 5 * model
	rng := rand.New(rand.NewPCG(1, 2))
	var q []queueSample
	for at := int64(0); at < int64(18*time.Second); at += int64(rng.ExpFloat64() * 250e3) {
		phase := float64(at%int64(period)) / float64(period)
		level := 14 + 8*phase // rises through the period, then drops at once
		if at > int64(9*time.Second) {
			level += 20
		}
		q = append(q, queueSample{at: at, backlogPkts: math.Round(level)})
	}
	const bin = int64(2 * time.Millisecond)
	x := binnedBacklog(q, bin)
	got, seen := sawtoothPeriod(x, float64(model)/float64(bin))
	if want := int(int64(period) / bin); !seen || math.Abs(float64(got-want)) > 0.05*float64(want) {
		t.Fatalf("period %d bins (seen %v), want %d within 5 %%", got, seen, want)
	}
	if _, swing, _ := perPeriod(x, got); math.Abs(swing-8) > 1 {
		t.Errorf("swing over the found period %.1f packets, want 8 ± 1", swing)
	}
	if _, swing, _ := perPeriod(x, int(int64(model)/bin)); swing > 3 {
		t.Errorf("swing over the model's period %.1f packets: the test's sawtooth is not longer than the model's", swing)
	}
}

// The phantom queue's rule by hand, on four packets of service time 1
// handed over at 0, 0.2, 0.4 and 3.0, draining at γ = 0.5 and marking
// above θ = 0.5: the wire starts them at 0, 1, 2 and 3; the counter finds
// 0, then 1 − 0.5 = 0.5 (not above), then 1.5 − 0.5 = 1.0 (marked), then
// 2 − 0.5 = 1.5 (marked): two marks. Drained at the port's own rate
// (γ = 1) it has drained each packet by the time the wire starts the
// next, and marks nothing above any threshold (a hundredth of a packet
// here: at 0, rounding leaves crumbs, as the marker's integer drain does).
func TestPhantomMarksByHand(t *testing.T) {
	if got := PhantomMarks([]float64{0, 0.2, 0.4, 3.0}, 1, 0.5, 0.5); got != 2 {
		t.Errorf("%d marks, want 2", got)
	}
	if got := PhantomMarkProbability(0.9, 1, 0.01, 100_000, 1); got != 0 {
		t.Errorf("γ = 1 marked %.4f of the packets, want none", got)
	}
}

// The marking probability at low load by hand: to first order in ρ, a
// packet is marked when the packet before it started less than
// (1 − θ)/γ service times earlier, for then the counter still holds more
// than θ of it; at ρ = 0.01, γ = 0.5, θ = 0 that is 1 − e^{−0.02} =
// 0.0198, within the 5 % that chains of three packets and the draw
// (10⁶ arrivals, 20,000 marks: 0.7 %) move it.
func TestPhantomMarkProbabilityLowLoad(t *testing.T) {
	got := PhantomMarkProbability(0.01, 0.5, 0, 1_000_000, 1)
	want := 1 - math.Exp(-0.02)
	near(t, "P(mark) at ρ = 0.01", got, want, 0.05*want)
}

// Friedman's tandem theorem, which PhantomMarkProbability rests on:
// behind constant-time servers each packet's waits in the wire (service
// 1) and the counter (service 1/γ) sum to its wait in one queue of
// service 1/γ, so the rule marks exactly the packets whose W' − W₁
// exceeds θ/γ service times.
func TestPhantomMarksAreTheTandem(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var at []float64
	x := 0.0
	for range 200_000 {
		x += r.ExpFloat64() / 0.6
		at = append(at, x)
	}
	gamma, theta := 0.8, 0.66
	w1, wp := LindleyWaits(at, 1), LindleyWaits(at, 1/gamma)
	want := 0
	for i := range at {
		if wp[i]-w1[i] > theta/gamma+1e-9 {
			want++
		}
	}
	got := PhantomMarks(at, 1, gamma, theta)
	if math.Abs(float64(got-want)) > 1e-4*float64(len(at)) {
		t.Errorf("the rule marked %d packets, the tandem %d", got, want)
	}
	t.Logf("%d of %d marked (%.1f %%)", got, len(at), 100*float64(got)/float64(len(at)))
}

// The Kolmogorov–Smirnov helpers: a sample of the law itself passes at
// the 1 % level, a shifted one does not, and an AR(1) series decorrelates
// after about 3/|ln φ| steps.
func TestKolmogorovSmirnov(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	exp := func(x float64) float64 { return 1 - math.Exp(-x) }
	var xs, shifted []float64
	for range 5000 {
		v := r.ExpFloat64()
		xs, shifted = append(xs, v), append(shifted, v+0.1)
	}
	if d, c := KSDistance(xs, exp, 0), KSCritical(len(xs)); d > c {
		t.Errorf("a sample of the law: D = %.4f above %.4f", d, c)
	}
	if d, c := KSDistance(shifted, exp, 0), KSCritical(len(xs)); d <= c {
		t.Errorf("a shifted sample: D = %.4f within %.4f", d, c)
	}
	// Waits 10 % long move the exponential law by at most
	// e^(−x/1.1) − e^(−x) at x = 1.1·ln 1.1 / 0.1 = 1.0484: 0.03505. With
	// that band a sample 5 % long passes and one 20 % long does not.
	if band := KSScaled(xs, exp, 0, 1.1); math.Abs(band-0.03505) > 5e-4 {
		t.Errorf("the band of a 10 %% scale: %.5f, want 0.03505", band)
	}
	band := max(KSScaled(xs, exp, 0, 0.9), KSScaled(xs, exp, 0, 1.1))
	for _, c := range []struct {
		scale float64
		pass  bool
	}{{1.05, true}, {1.2, false}} {
		var scaled []float64
		for _, x := range xs {
			scaled = append(scaled, c.scale*x)
		}
		if d, lim := KSDistance(scaled, exp, 0), KSCritical(len(xs))+band; (d <= lim) != c.pass {
			t.Errorf("a sample %.0f %% long: D = %.4f against %.4f, want within %v", 100*(c.scale-1), d, lim, c.pass)
		}
	}
	ar, v := make([]float64, 100_000), 0.0
	for i := range ar {
		v = 0.9*v + r.NormFloat64()
		ar[i] = v
	}
	if lag, want := DecorrelationLag(ar), 3/-math.Log(0.9); math.Abs(float64(lag)-want) > 5 {
		t.Errorf("AR(1) φ = 0.9 decorrelates at lag %d, want about %.0f", lag, want)
	}
}
