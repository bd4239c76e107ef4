package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fabric-emu/fabric/experiments"
)

func init() { addCommand(runCmd) }

// runCmd is `fabric run`: an experiment file or a built-in scenario, its
// sweep run trial by trial, a report at the end.
func runCmd() *cobra.Command {
	var flags struct {
		quick     bool
		resume    string
		seed      uint64
		out       string
		keepPcaps bool
		modelOnly bool
	}
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

Ctrl-C stops cleanly: the current trial is marked incomplete and its lab is
removed; --resume DIR completes the run later with the same seed (a search
replays the probes search.json holds).`,
		Example: `  fabric run                              # hull/table1, quick
  fabric run hull/dynamic --quick
  fabric run my-experiment.yaml --seed 42
  fabric run swp/capacity --quick          # a capacity search
  fabric run swp/capacity --model-only     # the same, by the fluid model alone
  fabric run --resume runs/hull-dynamic/20261123T093000Z`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := ""
			if len(args) == 1 {
				name = args[0]
			}
			spec, err := experiments.Select(name, flags.quick, flags.resume)
			if err != nil {
				return err // a file:line error or a mismatched --resume: exit 2
			}
			errOut := cmd.ErrOrStderr()
			opts := experiments.Options{
				Out: flags.out, Resume: flags.resume, Seed: flags.seed,
				Progress: errOut, KeepPcaps: flags.keepPcaps,
			}
			if flags.modelOnly {
				return printModelCapacity(cmd, spec, flags.seed)
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
			if res != nil && res.Dir != "" {
				fmt.Fprintf(errOut, "run directory: %s\n", res.Dir)
			}
			if err != nil {
				if errors.Is(err, experiments.ErrInterrupted) {
					return exitError{code: 130, msg: err.Error()}
				}
				return err
			}
			fmt.Fprint(cmd.OutOrStdout(), res.Report.Markdown)
			fmt.Fprintf(errOut, "%d trials (%d already complete), %d unfaithful, %d flagged run(s) set aside, %s; seed %d\n",
				len(res.Trials), res.Skipped, res.Unfaithful, res.SetAside, res.Elapsed.Round(1e9), res.Seed)
			return nil
		},
	}
	f := c.Flags()
	f.BoolVar(&flags.quick, "quick", false, "run the scenario's quick variant (short, used in CI)")
	f.StringVar(&flags.resume, "resume", "", "complete the run in this directory, skipping complete trials")
	f.Uint64Var(&flags.seed, "seed", 0, "base seed (default: the file's seed, else from the clock, and 1 with --model-only); recorded in run.json")
	f.StringVar(&flags.out, "out", "runs", "directory runs are written under")
	f.BoolVar(&flags.keepPcaps, "keep-pcaps", false, "keep the LMM's packet captures after matching")
	f.BoolVar(&flags.modelOnly, "model-only", false, "answer a search with SWP's fluid model alone: no lab, seconds (its first guesses)")
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
