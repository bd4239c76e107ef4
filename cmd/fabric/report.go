package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/fabric-emu/fabric/experiments"
)

// reportCmd is `fabric report RUNDIR...`: the tables again, with the
// paper's published numbers side by side for the HULL scenarios.
func reportCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "report RUNDIR...",
		Short: "Rebuild report.md and summary.csv of runs, with the paper's numbers side by side",
		Long: `Load every trial under the run directories, write report.md, summary.csv and
the figures into the first, and print the report. For runs of the HULL
scenarios the paper's published table is printed next to the measured one,
with the ratio between schemes and an ordering pass/fail per row.

Trial directories from many places (fabric trial on many machines) merge into
one report, written into the first directory; trials of different experiments
or fabric builds, or one trial twice, are refused (exit 2).`,
		Example: `  fabric report runs/hull-dynamic/20261123T093000Z
  fabric report /shared/results node7-results/`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, d := range args {
				if st, err := os.Stat(d); err != nil || !st.IsDir() {
					return badInput(fmt.Errorf("%s: not a run directory", d))
				}
			}
			md, err := experiments.Report(args...)
			var me *experiments.MergeError
			if errors.As(err, &me) {
				return badInput(err)
			}
			if err != nil {
				return err
			}
			fmt.Fprint(cmd.OutOrStdout(), md)
			return nil
		},
	}
}

func init() { addCommand(reportCmd) }
