package experiments

import (
	"cmp"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/fabric-emu/fabric/experiments/fluid"
)

// longResponsesShared is how long the schedule of point p of spec (as it
// runs, scaled) with trial seed seed keeps two or more of its long
// responses (≥ 1 MB) at the client's port at once, by the fluid model of
// that port with its bandwidth shared evenly (processor sharing), and the
// long responses' count. A lone long response leaves its server at the
// server's link rate, which is the port's: it queues at its host, not at
// the switch. Only two at once queue at the port, where TCP drop-tail
// fills the buffer and DCTCP holds about K, so this is the time in which
// HULL Table 4's TCP-above-DCTCP ordering can show.
func longResponsesShared(t *testing.T, spec *Spec, p Point, seed uint64) (shared time.Duration, long int, load float64) {
	t.Helper()
	sp := spec.scaledBy(spec.runnableScale())
	g, sched := drawSchedule(t, sp, p, seed)
	// The capacity search's model of the receiver's port (guesser), with
	// the port's bandwidth shared evenly among the responses.
	gs := &guesser{spec: sp}
	if err := gs.locate(g, sched); err != nil {
		t.Fatal(err)
	}
	port, _, err := gs.port(sp.schemeAt(p))
	if err != nil {
		t.Fatal(err)
	}
	port.Fair = true
	var flows []fluid.Flow
	for i := range sched.Len() {
		if m := sched.Message(i); m.Dst == gs.receiver {
			flows = append(flows, fluid.Flow{StartNS: m.TimeNS, Size: m.Size})
			load += float64(m.Size) * 8 / (port.RateBPS * sp.Duration.Seconds())
		}
	}
	fct, err := fluid.Run(port, gs.tcp, gs.path, flows, 10*sp.Duration)
	if err != nil {
		t.Fatal(err)
	}
	type edge struct {
		at    int64
		delta int
	}
	var edges []edge
	for i, f := range flows {
		if f.Size < 1e6 {
			continue
		}
		long++
		end := f.StartNS + int64(10*sp.Duration)
		if fct[i] >= 0 {
			end = f.StartNS + int64(fct[i])
		}
		edges = append(edges, edge{f.StartNS, 1}, edge{end, -1})
	}
	slices.SortFunc(edges, func(a, b edge) int { return cmp.Compare(a.at, b.at) })
	n := 0
	for i, e := range edges {
		if n >= 2 {
			shared += time.Duration(e.at - edges[i-1].at)
		}
		n += e.delta
	}
	return shared, long, load
}

// The quick hull/dynamic's draw is one in which TCP's ordering above
// DCTCP-30K can show: its responses carry the nominal 40 % load (within
// 5 %: a 1.2 s window of Poisson arrivals carries 7–73 % in seeds 1–20),
// and its long responses share the client's port for at least the time
// an M/G/1 processor-sharing queue spends with two or more in it, ρ²
// (its number in system is geometric, P(N = n) = (1 − ρ)ρⁿ, whatever the
// sizes: Kleinrock, Queueing Systems vol. 2, §4.4). Seed 1's draw shares
// it for none of its 12 s, and TCP then sat below DCTCP-30K.
func TestQuickHULLDynamicSharesTheClientsPort(t *testing.T) {
	spec, err := Builtin("hull/dynamic")
	if err != nil {
		t.Fatal(err)
	}
	q := spec.WithQuick()
	if q.Seed == 0 {
		t.Fatal("the quick variant names no seed: its draw is unchecked")
	}
	for _, p := range q.Points() {
		if p.Scheme != "tcp-droptail" {
			continue
		}
		shared, long, load := longResponsesShared(t, q, p, TrialSeed(q.Seed, p.Traffic, 1))
		d := q.scaledBy(q.runnableScale()).Duration
		t.Logf("seed %d, load %.2f: %d long responses, the port shared %v of %v (%.0f %%; ρ² = %.0f %%)",
			q.Seed, load, long, shared.Round(time.Millisecond), d, 100*shared.Seconds()/d.Seconds(), 100*p.Load*p.Load)
		if math.Abs(load-p.Load) > 0.05*p.Load {
			t.Errorf("seed %d's responses carry %.2f of the port, want %.2f within 5 %%", q.Seed, load, p.Load)
		}
		if shared.Seconds() < p.Load*p.Load*d.Seconds() {
			t.Errorf("seed %d's long responses share the port %v of %v, want at least ρ² of it", q.Seed, shared, d)
		}
	}
}
