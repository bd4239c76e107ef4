package validation

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fabric-emu/fabric/hosts"
	"github.com/fabric-emu/fabric/internal/testenv"
	"github.com/fabric-emu/fabric/results/report"
)

// The lab test's hosts run `fabric transport …`: a fabric binary built
// once for the package.
func TestMain(m *testing.M) { testenv.RunWithFabric(m, hosts.EnvFabricBinary) }

// Every validation scenario has its checks, and only those have.
func TestEveryScenarioIsChecked(t *testing.T) {
	var names []string
	for _, n := range Scenarios() {
		sc, err := load(n, true)
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, sc.spec.Name)
	}
	for n := range checkers {
		if !slices.Contains(names, n) {
			t.Errorf("checks for %s, which no built-in scenario is", n)
		}
	}
	if _, err := load("hull/table1", true); err == nil {
		t.Error("hull/table1 loaded as a validation scenario")
	}
}

// The quick validation, what CI holds fabric to: every check of every
// scenario's quick variant within the tolerance (10 % for the
// M/D/1 port, Little's law and the delay lines, 25 % for DCTCP, 20 % for
// the phantom queue, the M/D/1 waits' distribution by Kolmogorov–Smirnov
// at 1 %), on trials the fidelity monitor did not flag. A flagged trial
// is a stall the attempt measured (the hypervisor's, which can leave the
// check not judged, when its delay lines' CPU lost more than
// testenv.StallStealPct to steal or the judge flagged it for steal), and so is a thread of the machine held
// back past 1 ms (a Poisson sender's packets a millisecond late bunch: the
// mean gap between them is 2 ms); only then is an attempt retried, twice at most (one
// hiccup of tens of milliseconds flags a trial), and a retry runs the
// scenarios that did not pass again, with their seeds. About 60 s of
// traffic and labs.
func TestQuickValidation(t *testing.T) {
	testenv.RequireRoot(t)
	pending := Scenarios()
	testenv.Retry(t, 3, time.Millisecond, func(a *testenv.Attempt) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		res, err := Run(ctx, Options{Quick: true, Out: t.TempDir(), LabPrefix: "tval", Only: pending})
		if err != nil {
			a.Fatalf("validation: %v", err)
		}
		var again []string
		flagged := map[string]bool{}
		for _, c := range res.Checks {
			cells := c.Cells()
			a.Logf("%s", strings.Join(cells[:], " | "))
			switch {
			case c.Verdict == Pass:
				continue
			case c.Verdict == Unfaithful && !flagged[c.Trial]:
				flagged[c.Trial] = true
				if steal, judged := trialSteal(c.Trial); judged || steal > testenv.StallStealPct {
					a.Stolen("the hypervisor took %.1f %% of the CPU or the delay lines' CPU: %s", steal, c.Cause)
				} else {
					a.Stalled("%s", c.Cause)
				}
				a.Errorf("%s: its trial %s was flagged, so its checks are not believed: %s", c.Scenario, c.Trial, c.Cause)
			case c.Verdict == Fail:
				a.Errorf("FAIL %s: %s (measured as %s; %s)", c.Name, c.Cause, c.Note, c.Trial)
			}
			if !slices.Contains(again, c.Scenario) {
				again = append(again, c.Scenario)
			}
		}
		pending = again
	})
}

// trialSteal is the larger of what the hypervisor took of the machine and
// of its delay lines' CPU during trial's traffic, from its fidelity
// record, and whether the judge flagged the trial for it; 0 when the
// record cannot be read.
func trialSteal(trial string) (float64, bool) {
	var f report.Fidelity
	if readJSON(filepath.Join(trial, "fidelity.json"), &f) != nil {
		return 0, false
	}
	steal := f.CPUStealPct
	if f.DelayLines != nil {
		steal = max(steal, f.DelayLines.LoopCPUStealPct)
	}
	return steal, f.Stolen()
}

// A run's checks are written into its directory as the table prints them,
// with the cause of a miss, for its results page (report.ChecksFile).
func TestChecksWrittenForTheResultsPage(t *testing.T) {
	dir := t.TempDir()
	checks := []Check{
		{Name: "M/D/1 mean wait, ρ = 0.9", Unit: "µs", Theory: 5450, Measured: 5644, Tolerance: 0.1, Verdict: Pass},
		{Name: "DCTCP amplitude, N = 8", Unit: "pkts", Theory: 13.8, Measured: 18, Tolerance: 0.25, Verdict: Fail, Cause: "α's estimate is off"},
	}
	if err := writeChecks(dir, checks); err != nil {
		t.Fatal(err)
	}
	got, err := report.LoadChecks(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got == nil || got.CheckedBy == "" || len(got.Rows) != 2 {
		t.Fatalf("checks.json: %+v", got)
	}
	for i, c := range checks {
		cells, r := c.Cells(), got.Rows[i]
		if [5]string{r.Name, r.Theory, r.Measured, r.Error, r.Verdict} != cells || r.Cause != c.Cause {
			t.Errorf("row %d: %+v, want %q and cause %q", i, r, cells, c.Cause)
		}
	}
}
