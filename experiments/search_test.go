package experiments

import (
	"math"
	"testing"

	"github.com/fabric-emu/fabric/experiments/search"
	"github.com/fabric-emu/fabric/internal/units"
)

// A search probe changes the capacity and nothing else: every link runs at
// the probe's rate, the weighted ports take the candidate's weights, and
// the classes offer the same bits per second, so the probe's schedule is
// message for message the one at the lab's own rate (common random
// numbers across probes). No lab: specs and schedules only.
func TestSearchProbeChangesOnlyTheCapacity(t *testing.T) {
	spec, err := Parse("search.yaml", []byte(searchExperiment), "")
	if err != nil {
		t.Fatal(err)
	}
	s := &searcher{runner: &runner{spec: spec}}
	p := s.probePoint("w", search.Probe{RateBPS: 20e6 + 300, Weights: []int{1, 1}})
	if p.Rate != 20*units.Mbit || p.Name != "w_rate20Mbit_w1-1" {
		t.Fatalf("probe point %+v, want 20 Mbit/s (rounded to a Kbit) named w_rate20Mbit_w1-1", p)
	}
	if got := spec.OfferedLoad(p); math.Abs(got-0.3) > 1e-12 {
		t.Errorf("at 20 Mbit/s the classes offer %v of the link, want 0.3 (6 Mbit/s of the lab's 10)", got)
	}
	lab := spec.labFor(spec.schemeAt(p), p, "x")
	g, err := lab.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range g.Hosts() {
		if r := h.Ifaces[0].Link.Rate; r != 20*units.Mbit {
			t.Fatalf("%s's link at %v, want the probe's 20Mbit", h.Name, r)
		}
	}
	sw := g.Switches()[0]
	port, err := lab.Port(sw.Ifaces[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(port.Weights) != 2 || port.Weights[0] != port.Weights[1] {
		t.Errorf("port weights %v, want the candidate's 1:1", port.Weights)
	}
	if w := spec.Schemes["w"].Ports.Queues.Weights; w[1] != 4 {
		t.Errorf("the probe changed the file's scheme: weights %v", w)
	}
	nominal := Point{Scheme: "w", Load: spec.Traffic.Load, Traffic: p.Traffic}
	at, err := spec.Schedule(g, p, 7)
	if err != nil {
		t.Fatal(err)
	}
	base, err := spec.Schedule(spec.graph, nominal, 7)
	if err != nil {
		t.Fatal(err)
	}
	if at.Len() != base.Len() || at.Len() == 0 {
		t.Fatalf("%d messages at the probe's rate, %d at the lab's", at.Len(), base.Len())
	}
	for i := range at.Len() {
		if a, b := at.Message(i), base.Message(i); a.TimeNS != b.TimeNS || a.Size != b.Size || a.Class != b.Class {
			t.Fatalf("message %d: %+v at the probe's rate, %+v at the lab's", i, a, b)
		}
	}
}
