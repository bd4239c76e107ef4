package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/fabric-emu/fabric/experiments/validation"
)

func init() { addCommand(validateCmd) }

// validateCmd is `fabric validate`: the validation scenarios run and
// checked against queueing theory, one table.
func validateCmd() *cobra.Command {
	var flags struct {
		quick   bool
		out     string
		seed    uint64
		only    []string
		recheck []string
	}
	c := &cobra.Command{
		Use:   "validate",
		Short: "Check the emulator against queueing theory: M/D/1, Little's law, DCTCP, drop-tail CUBIC, the phantom queue, the delay lines",
		Long: `Run the validation scenarios (` + strings.Join(validation.Scenarios(), ", ") + `),
each like fabric run, and check every trial against its equation: one table
of check, theory, measured, error and verdict. A check that did not pass is
followed by the likeliest mechanism at fault. Exits 1 unless every check
passed (a check on a trial the fidelity monitor flagged is UNFAITHFUL, which
is not a pass).`,
		Example: `  fabric validate --quick       # what CI runs, about a minute
  fabric validate                 # the full variants, about 23 minutes
  fabric validate --only validate/md1
  fabric validate --recheck runs/validate-md1/20261129T045244Z`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, n := range flags.only {
				if !slices.Contains(validation.Scenarios(), n) {
					return badInput(fmt.Errorf("--only %s: no such validation scenario (have %s)", n, strings.Join(validation.Scenarios(), ", ")))
				}
			}
			var res *validation.Result
			var err error
			if len(flags.recheck) > 0 {
				// A directory that is not a finished validation run is the
				// caller's mistake, and nothing has run.
				if res, err = validation.Recheck(flags.recheck...); err != nil {
					return badInput(err)
				}
			} else {
				res, err = validation.Run(cmd.Context(), validation.Options{Quick: flags.quick, Out: flags.out, Seed: flags.seed,
					Only: flags.only, Progress: cmd.ErrOrStderr()})
			}
			if res != nil {
				printChecks(cmd.OutOrStdout(), res.Checks)
				fmt.Fprintf(cmd.ErrOrStderr(), "runs: %s\n", strings.Join(res.Runs, " "))
			}
			if err != nil {
				return err
			}
			if !res.Passed() {
				failed := 0
				for _, c := range res.Checks {
					if c.Verdict != validation.Pass {
						failed++
					}
				}
				return exitError{code: exitFailure, msg: fmt.Sprintf("%d of %d checks did not pass", failed, len(res.Checks))}
			}
			return nil
		},
	}
	f := c.Flags()
	f.BoolVar(&flags.quick, "quick", false, "run the scenarios' quick variants (short, used in CI)")
	f.StringVar(&flags.out, "out", "runs", "directory runs are written under")
	f.Uint64Var(&flags.seed, "seed", 0, "base seed (default: each scenario's own)")
	f.StringSliceVar(&flags.only, "only", nil, "run only these scenarios (repeatable)")
	f.StringSliceVar(&flags.recheck, "recheck", nil, "check these finished validation runs again from their files, running nothing (repeatable)")
	return c
}

// printChecks prints the table, then why each check that did not pass
// failed and how each was measured.
func printChecks(out io.Writer, checks []validation.Check) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CHECK\tTHEORY\tMEASURED\tERROR\tVERDICT")
	for _, c := range checks {
		cells := c.Cells()
		fmt.Fprintln(tw, strings.Join(cells[:], "\t"))
	}
	tw.Flush()
	told := map[string]bool{} // trials whose flags were printed
	for _, c := range checks {
		switch {
		case c.Verdict == validation.Unfaithful && told[c.Trial]:
			fmt.Fprintf(out, "\n%s %s: its trial was flagged, as above\n", c.Verdict, c.Name)
		case c.Verdict != validation.Pass:
			told[c.Trial] = true
			fmt.Fprintf(out, "\n%s %s: %s\n  measured as %s\n  trial: %s\n", c.Verdict, c.Name, c.Cause, c.Note, c.Trial)
		}
	}
}
