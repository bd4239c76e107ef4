package validation

import (
	"fmt"
	"slices"

	"github.com/fabric-emu/fabric/hosts/transport/udp"
)

// phantomSeed draws the Poisson arrivals of the marking probability's
// Monte Carlo: fixed, so the theory column is the same number every run.
const phantomSeed = 1

// phantomDraws is how many arrivals the marking probability is drawn
// over (PhantomMarkProbability).
const phantomDraws = 1_000_000

// phantomChecks are validate/phantom's checks of one trial: Poisson
// packets (ECN-capable) at load ρ through a port whose phantom queue
// drains at γ of its rate, γ > ρ, and marks above θ. The marked fraction
// is the port's marks over its ECN-capable packets (its marker's own
// counters). Two checks, within 20 %:
//   - against PhantomMarkProbability, the tandem of the port's wire and
//     the counter fed by Poisson arrivals (Friedman 1965; see the
//     function);
//   - against the phantom queue's rule replayed on the departures the
//     LMM saw at the port: what the marker should have marked given the
//     port's actual departures, which tells its arithmetic from its
//     input.
func phantomChecks(sc *scenario, t *trial) ([]Check, error) {
	port, err := lmmPort(sc.spec, t.meta.PointSpec.Scheme)
	if err != nil {
		return nil, err
	}
	if port.Phantom == nil {
		return nil, fmt.Errorf("%s: the scheme's bottleneck port has no phantom queue", t.dir)
	}
	rho, gamma := t.meta.Load, port.Phantom.Drain
	size := int64(t.meta.PointSpec.Size)
	if size == 0 {
		size = int64(sc.spec.Traffic.Size)
	}
	frame := float64(size + udp.Overhead)
	d := frame * 8 / t.meta.BottleneckBPS
	theta := float64(port.Phantom.Threshold) / frame
	b, err := t.bottleneck()
	if err != nil {
		return nil, err
	}
	if b.ECT == 0 {
		return nil, fmt.Errorf("%s: the port saw no ECN-capable packet (the udp transport's ecn arg)", t.dir)
	}
	measured := 100 * float64(b.Marks) / float64(b.ECT)
	pk, err := t.packets()
	if err != nil {
		return nil, err
	}
	out := make([]float64, len(pk))
	for i, p := range pk {
		out[i] = float64(p.Out-pk[0].Out) / 1e9
	}
	slices.Sort(out)
	replayed := 100 * float64(PhantomMarks(out, d, gamma, theta)) / float64(len(out))
	label := fmt.Sprintf("ρ = %.2f, γ = %.2f, θ = %v", rho, gamma, port.Phantom.Threshold)
	how := fmt.Sprintf("%d marks of %d ECN-capable packets, the port's marker's counters", b.Marks, b.ECT)
	replay := judged(Check{Name: "phantom queue rule, " + label, Unit: "%", Theory: replayed, Measured: measured, Tolerance: 0.20,
		Note: fmt.Sprintf("the rule replayed on the %d departures the LMM saw; %s", len(out), how)}, t, func(Check) string {
		return "the marker: phantom_update's arithmetic (its drain, its wire's serialisation, the strict > θ) disagrees with its rule, " +
			"or marks are lost between port_xmit and port_peer (the phantom_marks map)"
	})
	theory := judged(Check{Name: "phantom queue marks, " + label, Unit: "%", Theory: 100 * PhantomMarkProbability(rho, gamma, theta, phantomDraws, phantomSeed),
		Measured: measured, Tolerance: 0.20, Note: "P(W' − W₁ > θ/γC) for Poisson arrivals (Friedman's tandem), drawn over 10⁶ of them; " + how},
		t, func(Check) string {
			if replay.Verdict == Fail {
				return replay.Cause
			}
			return "the marker follows its rule, but the departures it saw are not an ideal wire's behind Poisson arrivals: " +
				"the senders' lateness bunches packets (see validate/md1's arrivals row), or the port's dequeues are late"
		})
	return []Check{theory, replay}, nil
}
