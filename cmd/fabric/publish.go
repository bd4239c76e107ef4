package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/fabric-emu/fabric/results/publish"
)

func init() { addCommand(publishCmd) }

// publishCmd is `fabric publish RUN_DIR NAME`: a run's light files into
// the docs tree, and the results page rewritten from them.
func publishCmd() *cobra.Command {
	var docs string
	c := &cobra.Command{
		Use:   "publish RUN_DIR NAME",
		Short: "Copy a run's light files into docs/results/NAME/ and rewrite docs/results/NAME.md",
		Long: fmt.Sprintf(`Copy the run directory's light files (run.json, summary.csv, report.md, every
trial's meta.json and fidelity records, CSV and JSON lines files, the
figures as PNG; each at most %d bytes, the larger ones named on the page;
never pcaps, logs, SVGs, the hosts' schedules or set-aside runs) into DOCS/results/NAME/<run>/,
then rewrite DOCS/results/NAME.md from every run published under NAME:
the commit, date, machine and steal of each, its figures and its report.`, publish.MaxFileSize),
		Example: `  fabric publish runs/hull-table1/20261129T041307Z hull-table1`,
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if st, err := os.Stat(args[0]); err != nil || !st.IsDir() {
				return badInput(fmt.Errorf("%s: not a run directory", args[0]))
			}
			res, err := publish.Publish(args[0], docs, args[1])
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "published %d files into %s", res.Copied, res.Dir)
			if n := len(res.LeftOut); n > 0 {
				fmt.Fprintf(cmd.OutOrStdout(), " (%d over %d bytes left out)", n, publish.MaxFileSize)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "; page %s\n", res.Page)
			return nil
		},
	}
	c.Flags().StringVar(&docs, "docs", "docs", "the docs directory of the fabric checkout")
	return c
}
