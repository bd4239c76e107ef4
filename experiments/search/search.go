// Package search finds the least link rate at which a traffic mix meets
// every class's SLO, as SWP's capacity comparison does (Zhao, Goyal,
// Alizadeh, Anderson, "SLOs without priorities", §5.3: "binary search to
// identify the minimum link capacity needed to meet the SLOs"), over
// trials that are expensive and noisy: emulated runs, not a model.
//
// The method is bisection on the logarithm of the rate. A bracket
// [Lo, Hi] holds the answer: Lo is a rate known (or assumed) to miss, Hi
// one known (or assumed) to meet. Each step tries the geometric
// midpoint, so the number of steps depends only on Hi/Lo and the
// tolerance, not on where the answer lies. For schemes with weights, each
// candidate weight vector is bisected in turn, and a later candidate only
// in [Lo, best so far]: it matters only if it beats the best, so it costs
// nothing to try above it.
//
// The package knows nothing of labs: a Judge runs the trials of one step
// and says whether the SLOs held. That keeps the logic testable against a
// deterministic judge with a known threshold.
package search

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
)

// Setting is what one step tries: a link rate and, for weighted schemes,
// the weights of the classes' bands.
type Setting struct {
	RateBPS float64 `json:"rate_bps"`
	Weights []int   `json:"weights,omitempty"`
}

// Outcome is what a Judge says about a step's setting.
type Outcome struct {
	Met bool `json:"met"`
	// Ratio is the worst measured over target of any objective (≤ 1 when
	// met); NaN when no objective had messages.
	Ratio float64 `json:"ratio"`
	// Uncertain is set when an objective's 95 % confidence interval over
	// the step's trials straddles its target.
	Uncertain bool `json:"uncertain,omitempty"`
	// Trials is how many trials the step judged, and Reruns how many
	// flagged runs of them it set aside and ran again; the budget counts
	// both.
	Trials int `json:"trials"`
	Reruns int `json:"reruns,omitempty"`
	// Incomplete counts messages that never finished; a step with any
	// has missed (their slowdowns, unmeasured, are at least the trial's).
	Incomplete int `json:"incomplete,omitempty"`
	// Unfaithful counts trials the fidelity monitor flagged (a saturated
	// CPU, a port short of its rate): their verdicts are suspect.
	Unfaithful int `json:"unfaithful,omitempty"`
}

// Judge runs one step's trials and says whether every SLO held.
type Judge func(ctx context.Context, s Setting) (Outcome, error)

// Config bounds one scheme's search.
type Config struct {
	// Lo is a rate that misses (never tried); Hi one assumed to meet,
	// tried only when nothing below it met.
	Lo, Hi float64
	// Tolerance stops the bisection when Hi/Lo ≤ 1 + Tolerance.
	Tolerance float64
	// MaxTrials is the trial budget: no step starts once it is spent.
	MaxTrials int
	// Candidates are the weight vectors to try; none for unweighted schemes.
	Candidates [][]int
	// Guess, when set, is a model's least rate for a candidate (ok false
	// when the model has none below Hi). The search then tries the
	// guess first and walks away from it in steps of 1 + Tolerance that
	// double while the verdict stays the same, until a step that meets
	// and one that misses bracket the answer, and bisects from there: a
	// good guess closes the bracket in two steps, a bad one costs about
	// twice the bisection's log steps between the guess and the answer.
	Guess func(ctx context.Context, weights []int) (rateBPS float64, ok bool, err error)
}

// Guess is a model's first guess for one candidate, as the search used
// it.
type Guess struct {
	Weights []int   `json:"weights,omitempty"`
	RateBPS float64 `json:"rate_bps"`
	// OK is false when the model met nowhere below the bracket's top.
	OK bool `json:"ok"`
}

// Step is one setting tried and its outcome, with the bracket after it.
type Step struct {
	Setting Setting `json:"setting"`
	Outcome Outcome `json:"outcome"`
	Lo      float64 `json:"lo_bps"`
	Hi      float64 `json:"hi_bps"`
}

// Result is one scheme's answer.
type Result struct {
	// RateBPS is the least rate found to meet every SLO (within
	// Tolerance of the true boundary), and Weights the candidate that met
	// there; Met is false when nothing up to Hi met, or the budget ran out
	// before anything did.
	RateBPS float64 `json:"rate_bps"`
	Weights []int   `json:"weights,omitempty"`
	Met     bool    `json:"met"`
	// Exhausted is set when the budget stopped the search early.
	Exhausted bool `json:"exhausted,omitempty"`
	// Trials counts every trial run, reruns of flagged ones included.
	Trials int    `json:"trials"`
	Steps  []Step `json:"steps"`
	// Guesses are the model's first guesses, per candidate, when the
	// search had a model.
	Guesses []Guess `json:"guesses,omitempty"`
}

// Ends are the steps the answer rests on: the one that met at RateBPS
// and the highest that missed below it with the same weights (the final
// bracket's ends; the floor, never tried, when none missed); when
// nothing met, the highest step, which missed. A trial the fidelity
// monitor flagged at either end may have decided the answer.
func (r Result) Ends() []Step {
	var met, missed *Step
	for i := range r.Steps {
		st := &r.Steps[i]
		switch {
		case !r.Met:
			if missed == nil || st.Setting.RateBPS > missed.Setting.RateBPS {
				missed = st
			}
		case !slices.Equal(st.Setting.Weights, r.Weights):
		case st.Outcome.Met && st.Setting.RateBPS == r.RateBPS:
			met = st
		case !st.Outcome.Met && st.Setting.RateBPS < r.RateBPS && (missed == nil || st.Setting.RateBPS > missed.Setting.RateBPS):
			missed = st
		}
	}
	var ends []Step
	for _, st := range []*Step{missed, met} {
		if st != nil {
			ends = append(ends, *st)
		}
	}
	return ends
}

// ErrBadConfig is returned for a bracket or tolerance that cannot work.
var ErrBadConfig = errors.New("search: bad configuration")

// Least bisects for the least rate that meets; progress, if not nil, sees
// the bracket before every step (the Step's Outcome still zero).
func Least(ctx context.Context, cfg Config, judge Judge, progress func(Step)) (Result, error) {
	if !(cfg.Lo > 0 && cfg.Hi > cfg.Lo && cfg.Tolerance > 0) {
		return Result{}, fmt.Errorf("%w: want 0 < lo < hi and tolerance > 0, got lo %g hi %g tolerance %g", ErrBadConfig, cfg.Lo, cfg.Hi, cfg.Tolerance)
	}
	candidates := cfg.Candidates
	if len(candidates) == 0 {
		candidates = [][]int{nil}
	}
	s := &state{cfg: cfg, judge: judge, progress: progress}
	for _, w := range candidates {
		if err := s.bisect(ctx, w); err != nil {
			return s.res, err
		}
	}
	return s.res, nil
}

// state is one scheme's search in progress.
type state struct {
	cfg      Config
	judge    Judge
	progress func(Step)
	res      Result
}

// bisect searches candidate w: in [Lo, best] once some candidate met,
// else in [Lo, Hi], probing Hi itself only when nothing below met.
func (s *state) bisect(ctx context.Context, w []int) error {
	lo, hi := s.cfg.Lo, s.cfg.Hi
	if s.res.Met {
		hi = s.res.RateBPS
	}
	met := false
	// However the search ends, the least rate that met so far is its
	// answer: a budget spent before the bracket closed still leaves one.
	defer func() {
		if met && (!s.res.Met || hi < s.res.RateBPS) {
			s.res.RateBPS, s.res.Weights, s.res.Met = hi, slices.Clone(w), true
		}
	}()
	if s.cfg.Guess != nil {
		var err error
		if lo, hi, met, err = s.fromGuess(ctx, w, lo, hi); err != nil || s.res.Exhausted {
			return err
		}
	}
	for hi/lo > 1+s.cfg.Tolerance {
		mid := math.Sqrt(lo * hi)
		o, ok, err := s.try(ctx, Setting{RateBPS: mid, Weights: w}, lo, hi)
		if err != nil || !ok {
			return err
		}
		if o.Met {
			hi, met = mid, true
		} else {
			lo = mid
		}
		s.res.Steps[len(s.res.Steps)-1].Lo, s.res.Steps[len(s.res.Steps)-1].Hi = lo, hi
	}
	if !met && !s.res.Met { // nothing below Hi met: does Hi?
		o, ok, err := s.try(ctx, Setting{RateBPS: hi, Weights: w}, lo, hi)
		if err != nil || !ok {
			return err
		}
		met = o.Met
	}
	return nil
}

// fromGuess tries the model's guess for candidate w, then away from it
// in doubling steps while the verdict stays the same, and returns the
// bracket that leaves for bisection and whether a step met; a spent
// budget stops it (Result.Exhausted).
func (s *state) fromGuess(ctx context.Context, w []int, lo, hi float64) (float64, float64, bool, error) {
	g, ok, err := s.cfg.Guess(ctx, w)
	if err != nil {
		return lo, hi, false, err
	}
	s.res.Guesses = append(s.res.Guesses, Guess{Weights: slices.Clone(w), RateBPS: g, OK: ok})
	if !ok {
		return lo, hi, false, nil
	}
	met, missed := false, false
	step := 1 + s.cfg.Tolerance
	for r := g; r > lo && r < hi && hi/lo > 1+s.cfg.Tolerance && !(met && missed); step *= step {
		o, ok, err := s.try(ctx, Setting{RateBPS: r, Weights: w}, lo, hi)
		if err != nil || !ok {
			return lo, hi, met, err
		}
		if o.Met {
			hi, met = r, true
			r /= step
		} else {
			lo, missed = r, true
			r *= step
		}
		s.res.Steps[len(s.res.Steps)-1].Lo, s.res.Steps[len(s.res.Steps)-1].Hi = lo, hi
	}
	return lo, hi, met, nil
}

// try judges p if the budget allows (ok false when it does not).
func (s *state) try(ctx context.Context, p Setting, lo, hi float64) (o Outcome, ok bool, err error) {
	if s.cfg.MaxTrials > 0 && s.res.Trials >= s.cfg.MaxTrials {
		s.res.Exhausted = true
		return Outcome{}, false, nil
	}
	step := Step{Setting: p, Lo: lo, Hi: hi}
	if s.progress != nil {
		s.progress(step)
	}
	o, err = s.judge(ctx, p)
	if err != nil {
		return o, false, err
	}
	s.res.Trials += o.Trials + o.Reruns
	step.Outcome = o
	s.res.Steps = append(s.res.Steps, step)
	return o, true, nil
}

// Steps is how many bisection steps a bracket [lo, hi] takes to reach
// hi/lo ≤ 1 + tolerance: each step halves log(hi/lo).
func Steps(lo, hi, tolerance float64) int {
	if !(lo > 0 && hi > lo && tolerance > 0) {
		return 0
	}
	n := math.Ceil(math.Log2(math.Log(hi/lo) / math.Log1p(tolerance)))
	return max(int(n), 0)
}
