package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"fabric/experiments"
)

var runFlags struct {
	quick     bool
	resume    string
	seed      uint64
	out       string
	keepPcaps bool
}

// runCmd is `fabric run`: an experiment file or a built-in scenario, its
// sweep run trial by trial, a report at the end.
var runCmd = &cobra.Command{
	Use:   "run [NAME|FILE]",
	Short: "Run an experiment (a file or a built-in scenario) and write its report",
	Long: `Run an experiment: every point of its sweep, every trial, each on a fresh lab.
Results go to OUT/NAME/TIMESTAMP/POINT/trial-N/ (meta.json, records, LMM
output, fidelity), with summary.csv and report.md at the top.

With no argument, runs the quick variant of the built-in ` + experiments.DefaultScenario + `.
Built-in scenarios: ` + strings.Join(experiments.Builtins(), ", ") + `.

Ctrl-C stops cleanly: the current trial is marked incomplete and its lab is
removed; --resume DIR completes the run later with the same seed.`,
	Example: `  fabric run                              # hull/table1, quick
  fabric run hull/dynamic --quick
  fabric run my-experiment.yaml --seed 42
  fabric run --resume runs/hull-dynamic/20261123T093000Z`,
	Args: cobra.MaximumNArgs(1),
	RunE: func(cmd *cobra.Command, args []string) error {
		name := experiments.DefaultScenario
		quick := runFlags.quick
		switch {
		case len(args) == 1:
			name = args[0]
		case runFlags.resume != "":
			// `fabric run --resume DIR` resumes whatever DIR ran.
			rf, err := experiments.ReadRunFile(runFlags.resume)
			if err != nil {
				return badInput(err)
			}
			name, quick = experiments.SourceOf(rf), rf.Quick
		default:
			quick = true
		}
		spec, err := experiments.Open(name)
		if err != nil {
			return err // a *yamlfile.Error: exit 2
		}
		if quick {
			spec = spec.WithQuick()
		}
		if runFlags.resume != "" {
			rf, err := experiments.ReadRunFile(runFlags.resume)
			if err != nil {
				return badInput(err)
			}
			if rf.Name != spec.Name || rf.Quick != spec.IsQuick {
				return badInput(fmt.Errorf("--resume %s: that run is %s (quick=%v), not %s (quick=%v)", runFlags.resume, rf.Name, rf.Quick, spec.Name, spec.IsQuick))
			}
		}
		res, err := experiments.Run(cmd.Context(), spec, experiments.Options{
			Out: runFlags.out, Resume: runFlags.resume, Seed: runFlags.seed,
			Progress: os.Stderr, KeepPcaps: runFlags.keepPcaps,
		})
		if res != nil && res.Dir != "" {
			fmt.Fprintf(os.Stderr, "run directory: %s\n", res.Dir)
		}
		if err != nil {
			if errors.Is(err, experiments.ErrInterrupted) {
				return exitError{code: 130, msg: err.Error()}
			}
			return err
		}
		fmt.Print(res.Report.Markdown)
		fmt.Fprintf(os.Stderr, "%d trials (%d already complete), %d unfaithful, %s; seed %d\n",
			len(res.Trials), res.Skipped, res.Unfaithful, res.Elapsed.Round(1e9), res.Seed)
		return nil
	},
}

func init() {
	f := runCmd.Flags()
	f.BoolVar(&runFlags.quick, "quick", false, "run the scenario's quick variant (short, used in CI)")
	f.StringVar(&runFlags.resume, "resume", "", "complete the run in this directory, skipping complete trials")
	f.Uint64Var(&runFlags.seed, "seed", 0, "base seed (default: the file's seed, else from the clock); recorded in run.json")
	f.StringVar(&runFlags.out, "out", "runs", "directory runs are written under")
	f.BoolVar(&runFlags.keepPcaps, "keep-pcaps", false, "keep the LMM's packet captures after matching")
	addCommand(runCmd)
}
