// Package validation holds fabric's emulation to queueing theory: the
// built-in scenarios under validate/ run like any experiment, and each
// trial they leave is checked against an equation (an M/D/1 port, Little's
// law, DCTCP's steady state, drop-tail CUBIC's sawtooth, HULL's phantom
// queue, the delay lines). Every check says where its equation comes from,
// and one that fails names the likeliest mechanism at fault. `fabric
// validate` runs them all and prints the table.
package validation

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/fabric-emu/fabric/experiments"
	"github.com/fabric-emu/fabric/results/report"
)

// Prefix starts the names of the validation scenarios.
const Prefix = "validate/"

// scenario is one validation scenario and the checks of its trials.
type scenario struct {
	name   string
	spec   *experiments.Spec
	checks func(*scenario, *trial) ([]Check, error)
}

// checkers are the checks of each scenario, by the experiment's name, so
// that a copy of a validation scenario (another port rate, more flows)
// that keeps its name is checked alike.
var checkers = map[string]func(*scenario, *trial) ([]Check, error){
	"validate-md1":      md1Checks,
	"validate-dctcp":    dctcpChecks,
	"validate-phantom":  phantomChecks,
	"validate-delay":    delayChecks,
	"validate-droptail": droptailChecks,
}

// Scenarios are the validation scenarios, in the order Run runs them.
func Scenarios() []string {
	var out []string
	for _, name := range experiments.Builtins() {
		if strings.HasPrefix(name, Prefix) {
			out = append(out, name)
		}
	}
	return out
}

// Options tune Run.
type Options struct {
	// Quick runs each scenario's quick variant (what CI runs).
	Quick bool
	// Out is where the runs go (experiments.Options.Out); Seed overrides
	// the scenarios' own seeds when not 0; LabPrefix starts every lab's
	// name.
	Out       string
	Seed      uint64
	LabPrefix string
	// Only runs these scenarios (all when empty).
	Only []string
	// Progress receives the runner's progress lines.
	Progress io.Writer
}

// Result is every check of a validation, and the runs it made.
type Result struct {
	Checks []Check
	Runs   []string
}

// Passed reports whether every check passed.
func (r *Result) Passed() bool { return Passed(r.Checks) }

// Run runs the validation scenarios and checks their trials. It stops at
// the first scenario that cannot run (the error), with the checks of
// those before it.
func Run(ctx context.Context, opts Options) (*Result, error) {
	names := Scenarios()
	if len(opts.Only) > 0 {
		for _, n := range opts.Only {
			if !slices.Contains(names, n) {
				return nil, fmt.Errorf("no validation scenario %q (have %s)", n, strings.Join(names, ", "))
			}
		}
		names = opts.Only
	}
	res := &Result{}
	for _, name := range names {
		sc, err := load(name, opts.Quick)
		if err != nil {
			return res, err
		}
		r, err := experiments.Run(ctx, sc.spec, experiments.Options{Out: opts.Out, Seed: opts.Seed, LabPrefix: opts.LabPrefix, Progress: opts.Progress})
		if r != nil && r.Dir != "" {
			res.Runs = append(res.Runs, r.Dir)
		}
		if err != nil {
			return res, fmt.Errorf("%s: %w", name, err)
		}
		checks, err := sc.check(r.Trials)
		if err != nil {
			return res, fmt.Errorf("%s: %w", name, err)
		}
		if err := writeChecks(r.Dir, checks); err != nil {
			return res, err
		}
		res.Checks = append(res.Checks, checks...)
	}
	return res, nil
}

// load opens a validation scenario: a built-in's name or a file.
func load(name string, quick bool) (*scenario, error) {
	spec, err := experiments.Open(name)
	if err != nil {
		return nil, err
	}
	checks, ok := checkers[spec.Name]
	if !ok {
		return nil, fmt.Errorf("%s: experiment %s has no validation checks (those named %s have)", name, spec.Name, strings.Join(slices.Sorted(maps.Keys(checkers)), ", "))
	}
	if quick {
		spec = spec.WithQuick()
	}
	return &scenario{name: name, spec: spec, checks: checks}, nil
}

// Recheck checks the trials of finished validation runs again, from their
// files alone: a check's rule can change after its run, as the report's
// verdicts can (`fabric report`). A run of a file whose experiment is
// named as a validation scenario is checked as that scenario.
func Recheck(runDirs ...string) (*Result, error) {
	res := &Result{Runs: runDirs}
	for _, dir := range runDirs {
		rf, err := experiments.ReadRunFile(dir)
		if err != nil {
			return res, err
		}
		sc, err := load(experiments.SourceOf(rf), rf.Quick)
		if err != nil {
			return res, fmt.Errorf("%s: %w", dir, err)
		}
		trials, err := report.LoadRuns(dir)
		if err != nil {
			return res, err
		}
		checks, err := sc.check(trials)
		if err != nil {
			return res, fmt.Errorf("%s: %w", dir, err)
		}
		if err := writeChecks(dir, checks); err != nil {
			return res, err
		}
		res.Checks = append(res.Checks, checks...)
	}
	return res, nil
}

// writeChecks writes a run's checks into its directory as the results
// page shows them (report.ChecksFile), replacing an earlier check's.
func writeChecks(dir string, checks []Check) error {
	out := report.Checks{CheckedBy: experiments.BuildVersion().String()}
	for _, c := range checks {
		cells := c.Cells()
		out.Rows = append(out.Rows, report.CheckRow{Name: cells[0], Theory: cells[1], Measured: cells[2], Error: cells[3], Verdict: cells[4], Cause: c.Cause})
	}
	return report.WriteChecks(dir, out)
}

// check checks every trial of a finished run of the scenario.
func (sc *scenario) check(trials []*report.TrialSummary) ([]Check, error) {
	var out []Check
	for _, sum := range trials {
		t, err := openTrial(sum)
		if err != nil {
			return nil, err
		}
		cs, err := sc.checks(sc, t)
		if err != nil {
			return nil, err
		}
		for i := range cs {
			cs[i].Scenario, cs[i].Trial = sc.name, t.dir
		}
		out = append(out, cs...)
	}
	return out, nil
}
