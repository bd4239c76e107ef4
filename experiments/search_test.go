package experiments

import (
	"bytes"
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fabric-emu/fabric/experiments/search"
	"github.com/fabric-emu/fabric/internal/units"
)

// A search step changes the capacity and nothing else: every link runs at
// the step's rate, the weighted ports take the candidate's weights, and
// the classes offer the same bits per second, so the step's schedule is
// message for message the one at the lab's own rate (common random
// numbers across steps). No lab: specs and schedules only.
func TestSearchStepChangesOnlyTheCapacity(t *testing.T) {
	spec, err := Parse("search.yaml", []byte(searchExperiment), "")
	if err != nil {
		t.Fatal(err)
	}
	s := &searcher{runner: &runner{spec: spec}}
	p := s.stepPoint("w", search.Setting{RateBPS: 20e6 + 300, Weights: []int{1, 1}})
	if p.Rate != 20*units.Mbit || p.Name != "w_rate20Mbit_w1-1" {
		t.Fatalf("step point %+v, want 20 Mbit/s (rounded to a Kbit) named w_rate20Mbit_w1-1", p)
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
			t.Fatalf("%s's link at %v, want the step's 20Mbit", h.Name, r)
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
		t.Errorf("the step changed the file's scheme: weights %v", w)
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
		t.Fatalf("%d messages at the step's rate, %d at the lab's", at.Len(), base.Len())
	}
	for i := range at.Len() {
		if a, b := at.Message(i), base.Message(i); a.TimeNS != b.TimeNS || a.Size != b.Size || a.Class != b.Class {
			t.Fatalf("message %d: %+v at the step's rate, %+v at the lab's", i, a, b)
		}
	}
}

// An answer whose bracket's ends include unfaithful trials says so, in its
// row and in the inflation line; one resting on faithful trials does not.
func TestSearchReportFlagsSuspectAnswers(t *testing.T) {
	spec, err := Parse("search.yaml", []byte(searchExperiment), "")
	if err != nil {
		t.Fatal(err)
	}
	step := func(rate float64, met bool, unfaithful int) search.Step {
		return search.Step{Setting: search.Setting{RateBPS: rate}, Outcome: search.Outcome{Met: met, Trials: 3, Unfaithful: unfaithful}}
	}
	suspect := SchemeSearch{Scheme: "fifo", Result: search.Result{RateBPS: 16e6, Met: true,
		Steps: []search.Step{step(12e6, false, 0), step(18e6, true, 0), step(15e6, false, 2), step(16e6, true, 0)}}}
	clean := SchemeSearch{Scheme: "w", Result: search.Result{RateBPS: 10e6, Met: true,
		Steps: []search.Step{step(12e6, true, 0), step(9e6, false, 0), step(10e6, true, 0)}}}
	md := searchMarkdown(spec, []SchemeSearch{suspect, clean})
	for _, want := range []string{"suspect: 2 of the 6 trials it rests on unfaithful", "w 1.60× (suspect);"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	if strings.Count(md, "suspect:") != 1 {
		t.Errorf("only fifo's answer is suspect:\n%s", md)
	}
	clean.Steps[1].Outcome.Unfaithful = 1 // the miss below the answer, w's lower end
	if md := searchMarkdown(spec, []SchemeSearch{clean}); !strings.Contains(md, "suspect: 1 of the 6 trials") {
		t.Errorf("a flagged lower end does not reach the answer:\n%s", md)
	}
}

// The model alone answers a built-in search in seconds, without a lab:
// swp/capacity's quick variant (6 s of its three classes) gets a guess for
// every scheme and weight candidate, and fair queueing within the classes
// needs no more than the same weights without it, as in every emulated
// search (docs/capacity-search.md).
func TestModelCapacityOfABuiltinSearch(t *testing.T) {
	spec, err := Select("swp/capacity", true, "")
	if err != nil {
		t.Fatal(err)
	}
	spec.Sweep.Scheme = []string{"dctcp-weights", "dctcp-weights-fq"}
	q := *spec.Search
	q.Tolerance = 0.05 // the full search's resolution, not the quick one's 0.99
	spec.Search = &q
	var progress bytes.Buffer
	answers, err := ModelCapacity(context.Background(), spec, 1, &progress)
	t.Logf("%s", progress.String())
	if err != nil {
		t.Fatal(err)
	}
	md := ModelMarkdown(spec, answers)
	t.Logf("%s", md)
	if len(answers) != 2 || len(answers[0].Guesses) != 1 || len(answers[1].Guesses) != 1 {
		t.Fatalf("answers %+v, want one guess for each of two schemes", answers)
	}
	w, fq := answers[0].Guesses[0], answers[1].Guesses[0]
	if !w.OK || !fq.OK || fq.RateBPS > w.RateBPS*(1+spec.Search.tolerance()) {
		t.Errorf("weights %v: %.3g bit/s (ok %v); with fair queueing %.3g (ok %v), want no more", w.Weights, w.RateBPS, w.OK, fq.RateBPS, fq.OK)
	}
	if !strings.Contains(md, "dctcp-weights-fq") {
		t.Errorf("the table does not name the schemes:\n%s", md)
	}
}

// A search.json an earlier build wrote keeps its judged steps under
// "probes": --resume reads them as steps, and the next save writes them
// under "steps" alone.
func TestSearchFileOfAnEarlierBuildResumes(t *testing.T) {
	dir := t.TempDir()
	old := `{"probes": {"fifo_rate2Mbit": {"met": true, "ratio": 0.8, "trials": 3}}, "schemes": []}`
	if err := os.WriteFile(filepath.Join(dir, searchFileName), []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	s := &searcher{runner: &runner{dir: dir}}
	if err := s.load(); err != nil {
		t.Fatal(err)
	}
	if o, ok := s.state.Steps["fifo_rate2Mbit"]; !ok || !o.Met || o.Trials != 3 {
		t.Fatalf("steps after load %+v, want the earlier build's step fifo_rate2Mbit (met, 3 trials)", s.state.Steps)
	}
	if err := s.save(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, searchFileName))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), `"probes"`) || !strings.Contains(string(b), `"fifo_rate2Mbit"`) {
		t.Errorf("saved search.json should hold the step under \"steps\" only:\n%s", b)
	}
}
