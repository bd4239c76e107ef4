package main

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fabric-emu/fabric/experiments"
)

func init() { addCommand(runCmd) }

// runCmd is `fabric run`: an experiment file or a built-in scenario, its
// sweep run trial by trial, a report at the end.
func runCmd() *cobra.Command {
	var flags runFlags
	c := &cobra.Command{
		Use:   "run [NAME|FILE]",
		Short: "Run an experiment (a file or a built-in scenario) and write its report",
		Long: `Run an experiment: every point of its sweep, every trial, each on a fresh lab.
Results go to OUT/NAME/TIMESTAMP/POINT/trial-N/ (meta.json, records, LMM
output, fidelity), with summary.csv and report.md at the top.

With no argument, runs the quick variant of the built-in ` + experiments.DefaultScenario + `.
Built-in scenarios: ` + strings.Join(experiments.Builtins(), ", ") + `.

An experiment with a search section finds, per scheme, the least link rate
at which every traffic class meets its SLO (bisection over trials; the
answers are appended to report.md and kept in search.json).

A trial that fails is marked incomplete with its reason and the run goes
on; a scheme that fails on two points in a row is not run further. The
report lists every trial that did not complete under Failed, and fabric
exits 1.

Ctrl-C stops cleanly: the current trial is marked incomplete and its lab is
removed; --resume DIR completes the run later with the same seed (a search
replays the probes search.json holds).

Before the first trial fabric prices the run with this machine's profile
(fabric doctor --calibrate; measured first when it is missing, older than a
day, or from another kernel, CPU or build): per point its share of the cores,
the verdict the fidelity monitor is predicted to give, and the run's wall
time; --plan prints that and builds no lab. A file written at a paper's rates
and times says scale: auto (or --scale auto): fabric scales it itself and
picks per point the least s that the plan predicts faithful; --max-wall
refuses a run predicted to take longer.`,
		Example: `  fabric run                              # hull/table1, quick
  fabric run hull/dynamic --quick
  fabric run my-experiment.yaml --seed 42
  fabric run swp/capacity --quick          # a capacity search
  fabric run swp/capacity --model-only     # the same, by the fluid model alone
  fabric run hull/dynamic --quick --plan   # what it will cost this machine, no lab
  fabric run paper.yaml --scale auto --max-wall 30m
  fabric run hull/dynamic --bundle bundles/  # one directory per trial, for fabric trial elsewhere
  fabric run --resume runs/hull-dynamic/20261123T093000Z`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := ""
			if len(args) == 1 {
				name = args[0]
			}
			return runExperiment(cmd, name, flags)
		},
	}
	f := c.Flags()
	f.BoolVar(&flags.quick, "quick", false, "run the scenario's quick variant (short, used in CI)")
	f.StringVar(&flags.resume, "resume", "", "complete the run in this directory, skipping complete trials")
	f.Uint64Var(&flags.seed, "seed", 0, "base seed (default: the file's seed, else from the clock, and 1 with --model-only); recorded in run.json")
	f.StringVar(&flags.out, "out", "runs", "directory runs are written under")
	f.BoolVar(&flags.keepPcaps, "keep-pcaps", false, "keep the LMM's packet captures after matching")
	f.BoolVar(&flags.modelOnly, "model-only", false, "answer a search with SWP's fluid model alone: no lab, seconds (its first guesses)")
	f.BoolVar(&flags.plan, "plan", false, "print what the run will cost this machine, point by point, and build no lab")
	f.BoolVar(&flags.asJSON, "json", false, "with --plan, print the plan as JSON (run.json's plan)")
	f.StringVar(&flags.scale, "scale", "", "auto or a factor s: the file is at the paper's rates and times, and fabric scales it (auto: the least s the plan predicts faithful, per point)")
	f.DurationVar(&flags.maxWall, "max-wall", 0, "refuse a run predicted to take longer than this (e.g. 30m)")
	f.StringVar(&flags.profile, "profile", "", "plan with this machine profile (JSON, from fabric doctor --calibrate) instead of the state directory's")
	f.StringVar(&flags.labPrefix, "lab-prefix", "run", "start every lab's name with this")
	f.StringVar(&flags.bundle, "bundle", "", "build no lab: write one self-contained trial bundle per trial into this directory, for fabric trial on any machine")
	f.BoolVar(&flags.calibrate, "calibrate", true, "measure the machine's profile when it is missing or stale, and again after a trial the plan called faithful is flagged (false: plan only with a profile that stands)")
	return c
}

// printModelCapacity is `fabric run --model-only`: a search's answers by
// the fluid model alone.
func printModelCapacity(cmd *cobra.Command, spec *experiments.Spec, seed uint64) error {
	answers, err := experiments.ModelCapacity(cmd.Context(), spec, seed, cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	fmt.Fprint(cmd.OutOrStdout(), experiments.ModelMarkdown(spec, answers))
	return nil
}

// runFlags are `fabric run`'s flags.
type runFlags struct {
	quick     bool
	resume    string
	seed      uint64
	out       string
	keepPcaps bool
	modelOnly bool
	plan      bool
	asJSON    bool
	scale     string
	maxWall   time.Duration
	profile   string
	calibrate bool
	bundle    string
	labPrefix string
}

// runExperiment runs (or plans, or answers by the model) the experiment
// name names.
func runExperiment(cmd *cobra.Command, name string, flags runFlags) error {
	spec, err := experiments.Select(name, flags.quick, flags.resume)
	if err != nil {
		return err // a file:line error or a mismatched --resume: exit 2
	}
	if flags.scale != "" {
		if err := spec.SetScale(flags.scale); err != nil {
			return badInput(err)
		}
	}
	profile, err := profileFlag(flags.profile)
	if err != nil {
		return err
	}
	errOut := cmd.ErrOrStderr()
	opts := experiments.Options{
		Out: flags.out, Resume: flags.resume, Seed: flags.seed,
		Progress: errOut, KeepPcaps: flags.keepPcaps, LabPrefix: flags.labPrefix,
		Profile: profile, Calibrate: flags.calibrate, MaxWall: flags.maxWall,
	}
	if flags.modelOnly {
		return printModelCapacity(cmd, spec, flags.seed)
	}
	if flags.bundle != "" {
		return writeBundles(cmd, spec, experiments.BundleOptions{Dir: flags.bundle, Seed: flags.seed, Profile: profile, ScaleFlag: flags.scale})
	}
	if flags.plan {
		return runPlan(cmd, spec, profile, planFlags{seed: flags.seed, maxWall: flags.maxWall, asJSON: flags.asJSON})
	}
	var res *experiments.Result
	if spec.Search != nil { // search: the least rate per scheme instead of the sweep
		var sr *experiments.SearchResult
		if sr, err = experiments.Search(cmd.Context(), spec, opts); sr != nil {
			res = sr.Result
		}
	} else {
		res, err = experiments.Run(cmd.Context(), spec, opts)
	}
	var we *experiments.WallError
	if errors.As(err, &we) {
		return badInput(err)
	}
	return printRun(cmd, res, err)
}

// printRun prints a run's report and summary, and maps its error to the
// exit code: 130 interrupted, 1 when trials failed (after the report).
func printRun(cmd *cobra.Command, res *experiments.Result, err error) error {
	errOut := cmd.ErrOrStderr()
	if res != nil && res.Dir != "" {
		fmt.Fprintf(errOut, "run directory: %s\n", res.Dir)
	}
	switch {
	case errors.Is(err, experiments.ErrInterrupted):
		return exitError{code: 130, msg: err.Error()}
	case err != nil && !errors.Is(err, experiments.ErrTrialsFailed):
		return err
	}
	fmt.Fprint(cmd.OutOrStdout(), res.Report.Markdown)
	fmt.Fprintf(errOut, "%d trials (%d already complete), %d unfaithful, %d flagged run(s) set aside, %d not complete, %s; seed %d\n",
		len(res.Trials), res.Skipped, res.Unfaithful, res.SetAside, len(res.Failed), res.Elapsed.Round(1e9), res.Seed)
	if err != nil {
		return exitError{code: exitFailure, msg: err.Error()}
	}
	return nil
}
