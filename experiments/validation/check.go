package validation

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// Verdict is what a check concluded.
type Verdict string

const (
	Pass Verdict = "PASS"
	Fail Verdict = "FAIL"
	// Unfaithful: the trial the check measured was flagged by the fidelity
	// monitor (a saturated CPU, late delay lines…), so its numbers are
	// believed neither way.
	Unfaithful Verdict = "UNFAITHFUL"
)

// Check is one row of `fabric validate`'s table: a quantity theory
// predicts, what the lab measured, and the verdict.
type Check struct {
	Scenario string  `json:"scenario"` // validate/md1, …
	Name     string  `json:"name"`
	Unit     string  `json:"unit,omitempty"`
	Theory   float64 `json:"theory"`
	Measured float64 `json:"measured"`
	// Tolerance is the relative error allowed, |measured/theory − 1|; with
	// AtMost, Theory is a bound that Measured must not exceed instead (a
	// goodness-of-fit test's critical value).
	Tolerance float64 `json:"tolerance"`
	AtMost    bool    `json:"at_most,omitempty"`
	// Band, when set, replaces Tolerance by absolute bounds in Unit:
	// measured − theory within [−Band[0], +Band[1]] (a delay can only be
	// late by the machine's noise, never early by more than a batch).
	Band    *[2]float64 `json:"band,omitempty"`
	Verdict Verdict     `json:"verdict"`
	// Cause is the likeliest mechanism at fault when the check did not
	// pass; Note says how the figures were measured.
	Cause string `json:"cause,omitempty"`
	Note  string `json:"note,omitempty"`
	// Trial is the trial directory it measured.
	Trial string `json:"trial"`
}

// RelErr is (measured − theory)/theory; for a bound, measured/theory.
func (c Check) RelErr() float64 {
	if c.AtMost {
		return c.Measured / c.Theory
	}
	return c.Measured/c.Theory - 1
}

// within reports whether the measured value meets the theory.
func (c Check) within() bool {
	if math.IsNaN(c.Measured) || math.IsNaN(c.Theory) {
		return false
	}
	switch {
	case c.AtMost:
		return c.Measured <= c.Theory
	case c.Band != nil:
		d := c.Measured - c.Theory
		return d >= -c.Band[0] && d <= c.Band[1]
	}
	return math.Abs(c.RelErr()) <= c.Tolerance
}

// judged sets the verdict: Unfaithful when the trial was flagged, else
// Pass or Fail by the tolerance, with cause(c) named when it fails.
func judged(c Check, t *trial, cause func(Check) string) Check {
	switch {
	case !t.summary.Fidelity.Faithful():
		c.Verdict = Unfaithful
		c.Cause = "the trial was flagged (" + t.summary.Fidelity.Flags() + ")"
		if t.fid.Advice != "" {
			c.Cause += ": " + t.fid.Advice
		}
	case c.within():
		c.Verdict = Pass
	default:
		c.Verdict = Fail
		c.Cause = cause(c)
	}
	return c
}

// Passed reports whether every check passed.
func Passed(checks []Check) bool {
	return !slices.ContainsFunc(checks, func(c Check) bool { return c.Verdict != Pass })
}

// Cells are a check's table cells: check, theory, measured, error,
// verdict.
func (c Check) Cells() [5]string {
	num := func(v float64) string {
		switch {
		case math.IsNaN(v):
			return "—"
		case math.Abs(v) >= 100:
			return fmt.Sprintf("%.0f", v)
		case math.Abs(v) >= 10:
			return fmt.Sprintf("%.1f", v)
		default:
			return fmt.Sprintf("%.3g", v)
		}
	}
	unit := ""
	if c.Unit != "" {
		unit = " " + c.Unit
	}
	theory := num(c.Theory) + unit
	errCell := fmt.Sprintf("%+.1f %% (±%.0f %%)", 100*c.RelErr(), 100*c.Tolerance)
	switch {
	case c.AtMost:
		theory = "≤ " + theory
		errCell = fmt.Sprintf("%.2f× the bound", c.RelErr())
	case c.Band != nil:
		errCell = fmt.Sprintf("%+.0f%s (−%.0f…+%.0f)", c.Measured-c.Theory, unit, c.Band[0], c.Band[1])
	}
	return [5]string{c.Name, theory, num(c.Measured) + unit, errCell, string(c.Verdict)}
}

// quantile is the q-quantile of xs (sorted in place), by linear
// interpolation.
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	slices.Sort(xs)
	pos := q * float64(len(xs)-1)
	i := int(pos)
	if i+1 >= len(xs) {
		return xs[len(xs)-1]
	}
	return xs[i] + (pos-float64(i))*(xs[i+1]-xs[i])
}

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// plural joins reasons into a sentence.
func plural(parts ...string) string {
	var out []string
	for _, p := range parts {
		if p != "" {
			out = append(out, p)
		}
	}
	return strings.Join(out, "; ")
}
