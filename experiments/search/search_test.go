package search

import (
	"context"
	"errors"
	"slices"
	"testing"
)

// threshold is a judge whose SLO holds exactly at and above a known rate
// (per weight candidate), with trialsPer trials per step.
func threshold(at map[int]float64, trialsPer int, calls *int) Judge {
	return func(_ context.Context, p Setting) (Outcome, error) {
		*calls++
		key := 0
		if len(p.Weights) > 0 {
			key = p.Weights[0]
		}
		t := at[key]
		return Outcome{Met: p.RateBPS >= t, Ratio: t / p.RateBPS, Trials: trialsPer}, nil
	}
}

// The search converges on a known answer: within the tolerance above it,
// never below it, in exactly Steps steps (one more when only Hi meets).
func TestLeastConvergesOnAKnownThreshold(t *testing.T) {
	for _, want := range []float64{2.6e6, 3.3e6, 7.77e6, 9.9e6} {
		calls := 0
		cfg := Config{Lo: 2e6, Hi: 10e6, Tolerance: 0.02, MaxTrials: 100}
		res, err := Least(context.Background(), cfg, threshold(map[int]float64{0: want}, 3, &calls), nil)
		if err != nil {
			t.Fatal(err)
		}
		if !res.Met || res.RateBPS < want || res.RateBPS > want*(1+cfg.Tolerance) {
			t.Errorf("threshold %g: found %g (met %v), want within [%g, %g]", want, res.RateBPS, res.Met, want, want*1.02)
		}
		n := Steps(cfg.Lo, cfg.Hi, cfg.Tolerance)
		if res.RateBPS == cfg.Hi {
			n++ // nothing below Hi met, so Hi itself was tried
		}
		if calls != n || res.Trials != 3*n {
			t.Errorf("threshold %g: %d steps (%d trials), want %d steps of 3 trials", want, calls, res.Trials, n)
		}
		if last := res.Steps[len(res.Steps)-1]; last.Hi/last.Lo > 1+cfg.Tolerance || last.Lo > want || last.Hi < want {
			t.Errorf("threshold %g: final bracket [%g, %g] does not hold it within the tolerance", want, last.Lo, last.Hi)
		}
	}
}

// Nothing up to Hi meets: the search says so after probing Hi itself.
func TestLeastReportsInfeasible(t *testing.T) {
	calls := 0
	cfg := Config{Lo: 1e6, Hi: 4e6, Tolerance: 0.1}
	res, err := Least(context.Background(), cfg, threshold(map[int]float64{0: 5e6}, 1, &calls), nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Met {
		t.Errorf("met at %g, but the threshold is above Hi", res.RateBPS)
	}
	if last := res.Steps[len(res.Steps)-1]; last.Setting.RateBPS != cfg.Hi {
		t.Errorf("last step %g, want Hi %g", last.Setting.RateBPS, cfg.Hi)
	}
}

// With weight candidates, the answer is the best candidate's; later
// candidates are searched only below the best so far.
func TestLeastPicksTheBestWeights(t *testing.T) {
	calls := 0
	at := map[int]float64{1: 6e6, 2: 3e6, 3: 8e6}
	cfg := Config{Lo: 2e6, Hi: 10e6, Tolerance: 0.05, Candidates: [][]int{{1, 4}, {2, 4}, {3, 4}}}
	var bracket []float64
	res, err := Least(context.Background(), cfg, threshold(at, 1, &calls), func(s Step) { bracket = append(bracket, s.Hi) })
	if err != nil {
		t.Fatal(err)
	}
	if !res.Met || len(res.Weights) == 0 || res.Weights[0] != 2 || res.RateBPS < 3e6 || res.RateBPS > 3e6*1.05 {
		t.Errorf("found %g with weights %v, want ~3e6 with [2 4]", res.RateBPS, res.Weights)
	}
	for _, s := range res.Steps {
		if s.Setting.Weights[0] == 3 && s.Setting.RateBPS > 3e6*1.05 {
			t.Errorf("candidate [3 4] tried at %g, above the best so far", s.Setting.RateBPS)
		}
	}
	if len(bracket) != len(res.Steps) {
		t.Errorf("progress saw %d steps, the result has %d", len(bracket), len(res.Steps))
	}
}

// The trial budget stops the search: no step starts once it is spent.
func TestLeastStopsAtTheBudget(t *testing.T) {
	calls := 0
	cfg := Config{Lo: 1e6, Hi: 100e6, Tolerance: 0.001, MaxTrials: 9}
	res, err := Least(context.Background(), cfg, threshold(map[int]float64{0: 30e6}, 3, &calls), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Exhausted || res.Trials != 9 || calls != 3 {
		t.Errorf("exhausted %v after %d trials in %d steps, want true after 9 in 3", res.Exhausted, res.Trials, calls)
	}

	// Reruns of flagged trials are runs too: one per step here, so the
	// budget of 9 is spent after two steps of 3 + 1 and one more.
	calls = 0
	judge := threshold(map[int]float64{0: 30e6}, 3, &calls)
	rerunOne := func(ctx context.Context, p Setting) (Outcome, error) {
		o, err := judge(ctx, p)
		o.Reruns = 1
		return o, err
	}
	res, err = Least(context.Background(), cfg, rerunOne, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Exhausted || res.Trials != 12 || calls != 3 {
		t.Errorf("with a rerun per step: exhausted %v after %d runs in %d steps, want true after 12 in 3", res.Exhausted, res.Trials, calls)
	}
}

func TestLeastRejectsABadBracket(t *testing.T) {
	calls := 0
	_, err := Least(context.Background(), Config{Lo: 5, Hi: 5, Tolerance: 0.1}, threshold(nil, 1, &calls), nil)
	if !errors.Is(err, ErrBadConfig) || calls != 0 {
		t.Errorf("err %v after %d steps, want ErrBadConfig before any", err, calls)
	}
}

// The answer's ends are the met step at the answer and the highest miss
// below it with the same weights, so a flag on either reaches the answer.
func TestEndsAreTheBracketsEnds(t *testing.T) {
	calls := 0
	at := map[int]float64{1: 6e6, 2: 3e6}
	cfg := Config{Lo: 2e6, Hi: 10e6, Tolerance: 0.05, Candidates: [][]int{{1, 4}, {2, 4}}}
	res, err := Least(context.Background(), cfg, threshold(at, 1, &calls), nil)
	if err != nil {
		t.Fatal(err)
	}
	ends := res.Ends()
	if len(ends) != 2 {
		t.Fatalf("%d ends, want 2: %+v", len(ends), ends)
	}
	lo, hi := ends[0], ends[1]
	if lo.Outcome.Met || !hi.Outcome.Met || hi.Setting.RateBPS != res.RateBPS || lo.Setting.Weights[0] != 2 || hi.Setting.Weights[0] != 2 {
		t.Errorf("ends %+v and %+v, want a miss and the met step at %g, both with weights [2 4]", lo, hi, res.RateBPS)
	}
	if hi.Setting.RateBPS/lo.Setting.RateBPS > 1+cfg.Tolerance || lo.Setting.RateBPS > 3e6 {
		t.Errorf("ends %g and %g are not the final bracket around 3e6", lo.Setting.RateBPS, hi.Setting.RateBPS)
	}
	for _, st := range res.Steps {
		if !st.Outcome.Met && slices.Equal(st.Setting.Weights, res.Weights) && st.Setting.RateBPS > lo.Setting.RateBPS && st.Setting.RateBPS < res.RateBPS {
			t.Errorf("a higher miss at %g below the answer than the end %g", st.Setting.RateBPS, lo.Setting.RateBPS)
		}
	}

	calls = 0
	res, err = Least(context.Background(), Config{Lo: 1e6, Hi: 4e6, Tolerance: 0.1}, threshold(map[int]float64{0: 5e6}, 1, &calls), nil)
	if err != nil {
		t.Fatal(err)
	}
	if ends := res.Ends(); len(ends) != 1 || ends[0].Setting.RateBPS != 4e6 || ends[0].Outcome.Met {
		t.Errorf("nothing met: ends %+v, want the miss at Hi", ends)
	}
}

// A first guess near the answer closes the bracket in two steps; a far
// one still converges on the answer, only slower; none (ok false) leaves
// plain bisection.
func TestLeastFromAGuess(t *testing.T) {
	const want = 3.3e6
	cfg := Config{Lo: 1e6, Hi: 10e6, Tolerance: 0.05, MaxTrials: 100}
	plain := Steps(cfg.Lo, cfg.Hi, cfg.Tolerance)
	for _, c := range []struct {
		guess    float64
		ok       bool
		maxSteps int
	}{
		{want * 1.01, true, 2}, {want * 0.99, true, 2}, // within a tolerance step either side
		{want * 1.6, true, 2 * plain}, {want / 2.5, true, 2 * plain}, {9.9e6, true, 2 * plain},
		{0, false, plain},
	} {
		calls := 0
		cfg.Guess = func(context.Context, []int) (float64, bool, error) { return c.guess, c.ok, nil }
		res, err := Least(context.Background(), cfg, threshold(map[int]float64{0: want}, 1, &calls), nil)
		if err != nil {
			t.Fatal(err)
		}
		if !res.Met || res.RateBPS < want || res.RateBPS > want*(1+cfg.Tolerance) {
			t.Errorf("guess %g: found %g (met %v), want within [%g, %g]", c.guess, res.RateBPS, res.Met, want, want*1.05)
		}
		if last := res.Steps[len(res.Steps)-1]; last.Hi/last.Lo > 1+cfg.Tolerance {
			t.Errorf("guess %g: final bracket [%g, %g] wider than the tolerance", c.guess, last.Lo, last.Hi)
		}
		if calls > c.maxSteps || len(res.Guesses) != 1 || res.Guesses[0].RateBPS != c.guess {
			t.Errorf("guess %g: %d steps (want at most %d), guesses recorded %v", c.guess, calls, c.maxSteps, res.Guesses)
		}
		t.Logf("guess %.3g (ok %v): %d steps; plain bisection %d", c.guess, c.ok, calls, plain)
	}
}

// A budget spent before the bracket closes still leaves the least rate
// that met as the answer, marked exhausted, with or without a guess.
func TestBudgetSpentAfterAMeetKeepsIt(t *testing.T) {
	const want = 3.3e6
	for _, guess := range []float64{0, want * 1.5} {
		calls := 0
		cfg := Config{Lo: 1e6, Hi: 10e6, Tolerance: 0.01, MaxTrials: 3}
		if guess > 0 {
			cfg.Guess = func(context.Context, []int) (float64, bool, error) { return guess, true, nil }
		}
		res, err := Least(context.Background(), cfg, threshold(map[int]float64{0: want}, 1, &calls), nil)
		if err != nil {
			t.Fatal(err)
		}
		var met float64
		for _, st := range res.Steps {
			if st.Outcome.Met && (met == 0 || st.Setting.RateBPS < met) {
				met = st.Setting.RateBPS
			}
		}
		if met == 0 {
			t.Fatalf("guess %g: no step of %d met; the test needs one", guess, calls)
		}
		if !res.Exhausted || !res.Met || res.RateBPS != met {
			t.Errorf("guess %g: exhausted %v, met %v at %g; want exhausted and met at the least rate that met, %g", guess, res.Exhausted, res.Met, res.RateBPS, met)
		}
	}
}
