package paper

import (
	"fmt"
	"math"

	"github.com/fabric-emu/fabric/results/report"
)

// Claim is a published statement a run can check: a bound on one measured
// value, or on the ratio of two. Where a paper prints no table (Homa's
// thesis draws its slowdowns as figures and states bounds in the text), the
// claims are what fabric compares against.
type Claim struct {
	Label  string // what is claimed, in the run's terms
	Source string // where the paper says it, or "target" for fabric's own
	// Of picks the measured value from the report's rows; Over, when set,
	// the value it is divided by.
	Of, Over func(rows []report.Row) float64
	// AtMost is the bound the value (or ratio) must not exceed; AtLeast
	// the one it must reach. One of them is set.
	AtMost, AtLeast float64
}

// ClaimResult is a claim with what the run measured.
type ClaimResult struct {
	Claim
	Value float64 // NaN: not measured in this run
	Pass  bool
}

func (c Claim) check(rows []report.Row) ClaimResult {
	v := c.Of(rows)
	if c.Over != nil {
		v /= c.Over(rows)
	}
	r := ClaimResult{Claim: c, Value: v}
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		r.Value = math.NaN()
	case c.AtMost > 0:
		r.Pass = v <= c.AtMost
	default:
		r.Pass = v >= c.AtLeast
	}
	return r
}

func (c Claim) want() string {
	op := "≤ %g"
	if c.AtMost == 0 {
		op = "≥ %g"
	}
	return fmt.Sprintf(op, c.AtMost+c.AtLeast)
}

// rowValue picks a statistic of the row with this scheme, load and
// workload (the sweep's short name, "w4"; "" when the run has one).
// anyLoad makes rowValue match a scheme's row at whatever load it ran.
const anyLoad = -1.0

func rowValue(scheme, workload string, load float64, get func(report.Row) float64) func([]report.Row) float64 {
	return func(rows []report.Row) float64 {
		for _, r := range rows {
			if r.Scheme == scheme && (load == anyLoad || math.Abs(r.Load-load) < 1e-9) && r.Value("workload") == workload {
				return get(r)
			}
		}
		return math.NaN()
	}
}

func shortP99(r report.Row) float64 { return r.ShortP99 }

// claimsTable is the claims with their verdicts.
func claimsTable(results []ClaimResult) report.Table {
	t := report.Table{Header: []string{"claim", "source", "wanted", "fabric", "verdict"}, Right: []bool{false, false, true, true, false}}
	for _, r := range results {
		verdict := "n/a"
		switch {
		case math.IsNaN(r.Value):
		case r.Pass:
			verdict = "PASS"
		default:
			verdict = "FAIL"
		}
		t.Rows = append(t.Rows, []string{r.Label, r.Source, r.want(), num2(r.Value), verdict})
	}
	return t
}

func num2(v float64) string {
	if math.IsNaN(v) {
		return "–"
	}
	return fmt.Sprintf("%.2f", v)
}
