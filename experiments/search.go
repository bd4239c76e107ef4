package experiments

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/fabric-emu/fabric/emu"
	"github.com/fabric-emu/fabric/experiments/search"
	"github.com/fabric-emu/fabric/internal/units"
	"github.com/fabric-emu/fabric/internal/yamlfile"
	"github.com/fabric-emu/fabric/results/report"
)

// SearchSpec is an experiment's `search:`: instead of running the sweep,
// `fabric run` finds, per scheme, the least link rate at which every
// traffic class meets its SLO (SWP, Zhao et al., "SLOs without
// priorities", §5.3), and for weighted schemes the weights that do:
//
//	search:
//	  rate: {min: 2Mbit, max: 20Mbit}   # the bracket
//	  tolerance: 0.05                   # stop at max/min ≤ 1.05
//	  max_trials: 60                    # per scheme
//	  weights: [[1, 4], [1, 1], [4, 1]] # candidates for weighted schemes
//
// The classes keep the bits per second they offer at the lab's own rate
// (their load × the lab file's link rate) while every link's rate is
// varied; delays and the ports' byte settings stay the file's. The method
// is package search's: bisection on the logarithm of the rate, each step
// `trials` trials on fresh labs, met when every objective's mean over the
// trials of each trial's percentile is within its target (the report's
// SLO verdict; steps whose 95 % interval straddles a target are flagged
// uncertain). The bracket's floor is raised to the rate the classes offer
// (no slower link can keep a slowdown bounded), which is the model's
// first guess; the report counts the steps it saved.
type SearchSpec struct {
	Rate      RateRange `yaml:"rate" json:"rate"`
	Tolerance float64   `yaml:"tolerance,omitempty" json:"tolerance,omitempty"`
	// MaxTrials bounds each scheme's trials; unset, it is what the
	// bisection needs for every weight candidate, plus one step each,
	// twice that with a first guess.
	MaxTrials int `yaml:"max_trials,omitempty" json:"max_trials,omitempty"`
	// Weights are weight vectors tried in place of the queues.weights of
	// every scheme whose ports give them; unset, each such scheme keeps
	// its own.
	Weights [][]int `yaml:"weights,omitempty" json:"weights,omitempty"`
	// FirstGuess "model" starts each candidate's search at the least rate
	// SWP's fluid model of the bottleneck meets the SLOs at, over the
	// search's own messages (package fluid; guess.go), instead of at the
	// bracket's midpoint.
	FirstGuess string `yaml:"first_guess,omitempty" json:"first_guess,omitempty"`
}

// RateRange is a search's bracket of link rates.
type RateRange struct {
	Min units.Rate `yaml:"min" json:"min"`
	Max units.Rate `yaml:"max" json:"max"`
}

// defaultTolerance is a search's resolution when the file gives none.
const defaultTolerance = 0.05

func (q *SearchSpec) tolerance() float64 {
	if q.Tolerance > 0 {
		return q.Tolerance
	}
	return defaultTolerance
}

// SearchResult is a finished (or interrupted) capacity search: the run
// (directory, seed, every step's trials and the report) and each scheme's
// answer.
type SearchResult struct {
	*Result
	Schemes []SchemeSearch
}

// SchemeSearch is one scheme's answer, as search.json records it.
type SchemeSearch struct {
	Scheme string `json:"scheme"`
	search.Result
	// FloorBPS is the rate the classes offer, below which no rate can
	// meet a slowdown SLO: the bracket starts there when it is above
	// search.rate.min.
	FloorBPS float64 `json:"floor_bps"`
	// StepsSaved is how many bisection steps that floor saved.
	StepsSaved int `json:"steps_saved"`
}

// suspect counts the unfaithful trials among those the answer rests on
// (the final bracket's ends, search.Result.Ends), and those trials: a
// late delay line or a saturated CPU there may have moved the answer.
func (r SchemeSearch) suspect() (unfaithful, trials int) {
	for _, st := range r.Ends() {
		unfaithful += st.Outcome.Unfaithful
		trials += st.Outcome.Trials
	}
	return unfaithful, trials
}

// searchFileName is the search's state in the run directory.
const searchFileName = "search.json"

// searchFile is search.json: every step judged so far, by point name,
// which --resume replays instead of running again, and the answers.
type searchFile struct {
	Steps   map[string]search.Outcome `json:"steps"`
	Schemes []SchemeSearch            `json:"schemes"`
	// Probes is the steps' key as earlier builds wrote it, read by --resume
	// and folded into Steps.
	Probes map[string]search.Outcome `json:"probes,omitempty"`
}

// searcher is one capacity search in progress.
type searcher struct {
	*runner
	state searchFile
	start time.Time
	model *guesser // with search.first_guess
}

// Search runs spec's capacity search (spec.Search) into a run directory
// and writes its report, with the answers appended. Like Run, it leaves no
// lab behind when ctx ends, and Options.Resume continues it: judged steps
// are replayed from search.json and complete trials kept.
func Search(ctx context.Context, spec *Spec, opts Options) (*SearchResult, error) {
	if spec.Search == nil {
		return nil, errors.New("experiment " + spec.Name + " has no search section")
	}
	opts = opts.withDefaults()
	if err := emu.RequireRoot(); err != nil {
		return nil, err
	}
	res := &Result{}
	rf, err := prepareRunDir(ctx, spec, opts, res)
	if err != nil {
		return nil, err
	}
	res.Seed = rf.Seed
	s := &searcher{runner: newRunner(spec, opts, rf, res.Dir), start: time.Now(),
		state: searchFile{Steps: map[string]search.Outcome{}}}
	if err := s.load(); err != nil {
		return nil, err
	}
	out := &SearchResult{Result: res}
	for _, name := range spec.sweptSchemes() {
		ss, err := s.scheme(ctx, name)
		out.Schemes = append(out.Schemes, ss)
		s.state.Schemes = out.Schemes
		if err := errors.Join(err, s.save()); err != nil {
			return out, err
		}
	}
	res.Elapsed = time.Since(s.start)
	md := searchMarkdown(spec, out.Schemes)
	if err := os.WriteFile(filepath.Join(res.Dir, searchReportName), []byte(md), 0o644); err != nil {
		return out, err
	}
	return out, Finish(res) // report.md, with search.md appended
}

// searchReportName is the capacity section of report.md, kept in the run
// directory so that a report rebuilt from the trials (fabric report)
// keeps the search's answers: they come from search.json's steps and the
// spec, which the trials alone do not hold.
const searchReportName = "search.md"

// load reads search.json of a resumed run, if it has one.
func (s *searcher) load() error {
	b, err := os.ReadFile(filepath.Join(s.dir, searchFileName))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, &s.state); err != nil {
		return fmt.Errorf("%s: %w", filepath.Join(s.dir, searchFileName), err)
	}
	if s.state.Steps == nil {
		s.state.Steps = map[string]search.Outcome{}
	}
	for name, o := range s.state.Probes {
		if _, ok := s.state.Steps[name]; !ok {
			s.state.Steps[name] = o
		}
	}
	s.state.Probes = nil
	s.state.Schemes = nil // recomputed: the replay reaches the same answers
	return nil
}

// save writes search.json whole, through a rename, so an interruption
// leaves the previous state rather than half a file.
func (s *searcher) save() error {
	b, err := json.MarshalIndent(s.state, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(s.dir, searchFileName+".tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(s.dir, searchFileName))
}

// scheme searches one scheme.
func (s *searcher) scheme(ctx context.Context, name string) (SchemeSearch, error) {
	q := s.spec.Search
	cfg := s.spec.searchConfig(name)
	floor := s.spec.searchFloorBPS()
	if q.FirstGuess == FirstGuessModel {
		if s.model == nil {
			gs, err := newGuesser(s.spec, s.run.Seed, func(format string, args ...any) { fmt.Fprintf(s.opts.Progress, format, args...) })
			if err != nil {
				return SchemeSearch{Scheme: name}, err
			}
			s.model = gs
		}
		cfg.Guess = func(ctx context.Context, w []int) (float64, bool, error) { return s.model.least(ctx, name, w, cfg) }
	}
	res, err := search.Least(ctx, cfg, s.judge(name), func(st search.Step) {
		w := ""
		if len(st.Setting.Weights) > 0 {
			w = " weights " + weightsText(st.Setting.Weights, ":")
		}
		fmt.Fprintf(s.opts.Progress, "search %s: bracket %s–%s, trying %s%s (elapsed %s)\n", name, mbit(st.Lo), mbit(st.Hi),
			mbit(st.Setting.RateBPS), w, time.Since(s.start).Round(time.Second))
	})
	saved := search.Steps(float64(q.Rate.Min), cfg.Hi, cfg.Tolerance) - search.Steps(cfg.Lo, cfg.Hi, cfg.Tolerance)
	return SchemeSearch{Scheme: name, Result: res, FloorBPS: floor, StepsSaved: saved}, err
}

// searchFloorBPS is the rate the classes offer at the lab's own rate.
func (s *Spec) searchFloorBPS() float64 {
	return s.OfferedLoad(Point{Load: s.Traffic.Load}) * s.labRateBPS()
}

// searchConfig is scheme name's bracket, resolution, candidates and
// budget. Unset, the budget is what the bisection needs for every weight
// candidate, plus one step each for the bracket's top.
func (s *Spec) searchConfig(name string) search.Config {
	q := s.Search
	cfg := search.Config{Lo: max(float64(q.Rate.Min), s.searchFloorBPS()), Hi: float64(q.Rate.Max),
		Tolerance: q.tolerance(), Candidates: s.weightCandidates(name), MaxTrials: q.MaxTrials}
	if cfg.MaxTrials == 0 {
		steps := search.Steps(cfg.Lo, cfg.Hi, cfg.Tolerance) + 1
		if q.FirstGuess != "" {
			// A walk from a guess far off takes up to about twice the
			// bisection's steps (search.Config.Guess).
			steps *= 2
		}
		cfg.MaxTrials = s.Trials * steps * max(len(cfg.Candidates), 1)
	}
	return cfg
}

// weightCandidates are the weight vectors scheme name is searched over:
// search.weights when its ports are weighted, else none.
func (s *Spec) weightCandidates(name string) [][]int {
	q := s.Schemes[name].Ports.Queues
	if q == nil || len(q.Weights) == 0 {
		return nil
	}
	if len(s.Search.Weights) > 0 {
		return s.Search.Weights
	}
	return [][]int{q.Weights}
}

// judge runs (or replays) one step's trials and judges its SLOs.
func (s *searcher) judge(name string) search.Judge {
	return func(ctx context.Context, set search.Setting) (search.Outcome, error) {
		p := s.stepPoint(name, set)
		if o, ok := s.state.Steps[p.Name]; ok {
			fmt.Fprintf(s.opts.Progress, "search %s: %s %s (from %s)\n", name, p.Rate, verdictText(o), searchFileName)
			return o, nil
		}
		var trials []*report.TrialSummary
		reruns := 0
		for n := 1; n <= s.spec.Trials; n++ {
			if !s.complete(p, n) {
				fmt.Fprintf(s.opts.Progress, "    %s trial %d/%d\n", p.Name, n, s.spec.Trials)
			}
			t, setAside, err := s.settleTrial(ctx, p, n)
			if err != nil {
				return search.Outcome{}, err
			}
			trials = append(trials, t)
			reruns += setAside
		}
		o := stepOutcome(trials)
		o.Reruns = reruns
		s.state.Steps[p.Name] = o
		fmt.Fprintf(s.opts.Progress, "search %s: %s %s\n", name, p.Rate, verdictText(o))
		return o, s.save()
	}
}

// stepPoint is the point a step runs: every scheme and rate draws the
// same messages (one traffic name, so the same seeds), which keeps the
// steps of a bisection comparable.
func (s *searcher) stepPoint(scheme string, set search.Setting) Point {
	p := Point{Scheme: scheme, Load: s.spec.Traffic.Load, Traffic: "search", Weights: set.Weights, Rate: stepRate(set.RateBPS)}
	p.Name = scheme + "_rate" + p.Rate.String()
	if len(set.Weights) > 0 {
		p.Name += "_w" + weightsText(set.Weights, "-")
	}
	return p
}

// stepRate is a tried rate as links are set to it: whole Kbit/s.
func stepRate(bps float64) units.Rate {
	return units.Rate(math.Round(bps/float64(units.Kbit))) * units.Kbit
}

// stepOutcome judges a step from its trials (emulated, or the model's):
// the SLO table's verdict, missed when any message never finished, with
// the trials the fidelity monitor flagged counted.
func stepOutcome(trials []*report.TrialSummary) search.Outcome {
	o := outcomeOf(report.ClassVerdicts(trials))
	o.Trials = len(trials)
	for _, t := range trials {
		o.Incomplete += t.Fidelity.IncompleteFlows
		if !t.Fidelity.Faithful() {
			o.Unfaithful++
		}
	}
	o.Met = o.Met && o.Incomplete == 0
	return o
}

// outcomeOf judges a step from its classes' SLO cells: met when every
// objective is; an objective without messages judges nothing and marks
// the step uncertain.
func outcomeOf(classes []report.ClassCell) search.Outcome {
	o := search.Outcome{Met: true}
	for _, c := range classes {
		for _, obj := range c.SLO {
			if obj.Trials == 0 || math.IsNaN(obj.Ratio) {
				o.Uncertain = true
				continue
			}
			o.Met = o.Met && obj.Met()
			o.Ratio = max(o.Ratio, obj.Ratio)
			o.Uncertain = o.Uncertain || obj.CrossesTarget
		}
	}
	return o
}

// verdictText is a step's outcome in a progress line.
func verdictText(o search.Outcome) string {
	v := fmt.Sprintf("missed (worst objective at %.2f× its target)", o.Ratio)
	if o.Met {
		v = fmt.Sprintf("met (worst objective at %.2f× its target)", o.Ratio)
	}
	if o.Incomplete > 0 {
		v += fmt.Sprintf(", %d message(s) never finished", o.Incomplete)
	}
	if o.Reruns > 0 {
		v += fmt.Sprintf(", %d flagged run(s) set aside", o.Reruns)
	}
	if o.Unfaithful > 0 {
		v += fmt.Sprintf(", %d trial(s) unfaithful", o.Unfaithful)
	}
	if o.Uncertain {
		v += ", uncertain: a 95 % interval crosses a target or an objective had no messages"
	}
	return v
}

// mbit is a rate in bits per second as progress lines and tables show it.
func mbit(bps float64) string { return fmt.Sprintf("%.3g Mbit/s", bps/1e6) }

// searchMarkdown is the report's section on the search's answers.
func searchMarkdown(spec *Spec, schemes []SchemeSearch) string {
	q := spec.Search
	blocks := []string{report.Heading(2, "Capacity search"),
		fmt.Sprintf("Least link rate at which every class meets its SLO, per scheme: bisection on the logarithm of the rate in "+
			"[%s, %s] (the floor raised to the rate the classes offer), to within %g %%; each step is %d trial(s) and meets "+
			"when every objective's mean over them is within target (the SLO table's verdict)%s.",
			q.Rate.Min, q.Rate.Max, q.tolerance()*100, spec.Trials, rerunsText(spec.Reruns))}
	if q.FirstGuess == FirstGuessModel {
		blocks = append(blocks, "Each candidate's search started at the model's first guess (SWP's fluid model of the bottleneck "+
			"over the search's own messages: the least rate at which the model meets every SLO), then walked away from it in "+
			"doubling strides until one step met and one missed, and bisected between them.")
	}
	t := report.Table{
		Header: []string{"scheme", "least rate", "at the paper's scale", "weights", "steps", "trials",
			"steps saved by the floor", "model's guess", "answer"},
		Right: []bool{false, true, true, false, true, true, true, false, false},
	}
	s := spec.Scale.Factor(spec.labRateBPS())
	for _, r := range schemes {
		t.Rows = append(t.Rows, searchRow(q, s, r))
	}
	blocks = append(blocks, t.Markdown())
	if len(schemes) > 1 && schemes[0].Met {
		blocks = append(blocks, inflationText(schemes))
	}
	return "\n" + report.Blocks(blocks...)
}

// searchRow is a scheme's answer as the table's cells, s being the run's
// time-scale factor (0 when it has none).
func searchRow(q *SearchSpec, s float64, r SchemeSearch) []string {
	rate, paperRate, weights, answer := mbit(r.RateBPS), "–", "–", "met"
	if !r.Met {
		rate = "–"
	}
	if s > 0 && r.Met {
		paperRate = fmt.Sprintf("%.3g Gbit/s", r.RateBPS*s/1e9)
	}
	if len(r.Weights) > 0 {
		weights = weightsText(r.Weights, ":")
	}
	switch {
	case r.Exhausted && !r.Met:
		answer = "trial budget spent before any step met"
	case !r.Met:
		answer = "not met up to " + q.Rate.Max.String()
	case r.Exhausted:
		answer = "met; trial budget spent before the bracket closed"
	}
	if n, of := r.suspect(); n > 0 {
		answer += fmt.Sprintf("; suspect: %d of the %d trials it rests on unfaithful", n, of)
	}
	return []string{r.Scheme, rate, paperRate, weights, strconv.Itoa(len(r.Steps)), strconv.Itoa(r.Trials),
		strconv.Itoa(r.StepsSaved), guessesText(r.Guesses, q.Rate.Max.String()), answer}
}

// inflationText is the first scheme's least rate over each other one's
// that met.
func inflationText(schemes []SchemeSearch) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Inflation (%s's least rate over each scheme's):", schemes[0].Scheme)
	first, _ := schemes[0].suspect() // a suspect numerator makes every ratio suspect
	for _, r := range schemes[1:] {
		if r.Met {
			mark := ""
			if n, _ := r.suspect(); n+first > 0 {
				mark = " (suspect)"
			}
			fmt.Fprintf(&b, " %s %.2f×%s;", r.Scheme, schemes[0].RateBPS/r.RateBPS, mark)
		}
	}
	return b.String()
}

// guessesText is a scheme's first guesses in a table cell: the rate per
// candidate, or that the model met nowhere up to max.
func guessesText(gs []search.Guess, max string) string {
	if len(gs) == 0 {
		return "–"
	}
	var parts []string
	for _, g := range gs {
		v := "none up to " + max
		if g.OK {
			v = mbit(g.RateBPS)
		}
		if len(g.Weights) > 0 {
			v = weightsText(g.Weights, ":") + ": " + v
		}
		parts = append(parts, v)
	}
	return strings.Join(parts, "; ")
}

// rerunsText says, in a sentence about a step's trials, what becomes of
// a flagged one.
func rerunsText(reruns int) string {
	if reruns == 0 {
		return "; a trial the fidelity monitor flags counts as it ran"
	}
	return fmt.Sprintf("; a trial the fidelity monitor flags is set aside and run again with its seed, up to %d time(s), and "+
		"the trials column counts those runs too", reruns)
}

// validateSearches checks search and quick.search.
func (s *Spec) validateSearches() error {
	if err := s.validateSearch("search", s.Search, s.Sweep); err != nil {
		return err
	}
	if q := s.Quick; q != nil && q.Search != nil {
		sweep := s.Sweep
		if q.Sweep != nil {
			sweep = *q.Sweep
		}
		return s.validateSearch("quick.search", q.Search, sweep)
	}
	return nil
}

// validateSearch checks one search section (at path) with the sweep it
// runs with.
func (s *Spec) validateSearch(path string, q *SearchSpec, sweep Sweep) error {
	if q == nil {
		return nil
	}
	f := func(field, format string, args ...any) error {
		return yamlfile.Field(strings.TrimSuffix(path+"."+field, "."), format, args...)
	}
	withSLO := false
	for _, c := range s.Traffic.Classes {
		withSLO = withSLO || len(c.SLO) > 0
	}
	switch {
	case !withSLO:
		return f("", "a search looks for the least rate that meets the classes' SLOs: give traffic.classes with an slo")
	case len(sweep.Load)+len(sweep.Senders)+len(sweep.Flows)+len(sweep.Size)+len(sweep.Delay)+len(sweep.Workload) > 0:
		return f("", "a search varies the link rate itself; its sweep may only name schemes (sweep.scheme), and traffic.load gives a share's load")
	case s.LabSpec.Ports.Rate != nil:
		return f("rate", "the lab's ports.rate fixes the ports' rate; a search varies the links' rate")
	case q.Rate.Min <= 0:
		return f("rate.min", "want a positive rate such as 2Mbit, got %v", q.Rate.Min)
	case q.Rate.Max <= q.Rate.Min:
		return f("rate.max", "want a rate above rate.min (%v), got %v", q.Rate.Min, q.Rate.Max)
	case q.Tolerance < 0 || q.Tolerance >= 1:
		return f("tolerance", "want a relative resolution in (0, 1) such as 0.05, got %v", q.Tolerance)
	case q.MaxTrials < 0 || q.MaxTrials > 0 && q.MaxTrials < s.Trials:
		return f("max_trials", "a step is %d trial(s); want a budget of at least that, got %d", s.Trials, q.MaxTrials)
	case q.FirstGuess != "" && q.FirstGuess != FirstGuessModel:
		return f("first_guess", "want %q (SWP's fluid model of the bottleneck) or nothing, got %q", FirstGuessModel, q.FirstGuess)
	case q.FirstGuess != "" && len(s.graph.Switches()) != 1:
		return f("first_guess", "%v; this lab has %d switches", errNoModel, len(s.graph.Switches()))
	}
	if q.FirstGuess != "" {
		names := []string(sweep.Scheme)
		if len(names) == 0 || len(names) == 1 && names[0] == "all" {
			names = s.SchemeOrder
		}
		for _, name := range names {
			if _, err := connsOf(s.Schemes[name]); err != nil {
				return f("first_guess", "scheme %s: %v", name, err)
			}
		}
	}
	if offered := s.OfferedLoad(Point{Load: s.Traffic.Load}) * s.labRateBPS(); offered >= float64(q.Rate.Max) {
		return f("rate.max", "the classes offer %s; no rate up to %v can meet a slowdown SLO", mbit(offered), q.Rate.Max)
	}
	return s.validateWeightCandidates(path+".weights", q.Weights)
}

// validateWeightCandidates checks a search's weight vectors against
// every weighted scheme, as validateClassWeights checks the schemes'.
func (s *Spec) validateWeightCandidates(path string, candidates [][]int) error {
	if len(candidates) == 0 {
		return nil
	}
	var weighted []string
	for _, name := range s.SchemeOrder {
		if q := s.Schemes[name].Ports.Queues; q != nil && len(q.Weights) > 0 {
			weighted = append(weighted, name)
		}
	}
	if len(weighted) == 0 {
		return yamlfile.Field(path, "no scheme's ports give queues.weights for these candidates to replace")
	}
	for k, w := range candidates {
		at := fmt.Sprintf("%s[%d]", path, k)
		for j, v := range w {
			if v < 1 {
				return yamlfile.Field(fmt.Sprintf("%s[%d]", at, j), "a weight is a positive integer, got %d", v)
			}
		}
		for _, name := range weighted {
			if err := s.checkSchemeWeights(s.schemeAt(Point{Scheme: name, Weights: w}), at); err != nil {
				return err
			}
		}
	}
	return nil
}
