package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/fabric-emu/fabric/experiments"
	"github.com/fabric-emu/fabric/experiments/cost"
)

// profileFlag reads --profile FILE: a profile measured on another machine
// is bad input, at its file and line.
func profileFlag(file string) (*cost.Profile, error) {
	if file == "" {
		return nil, nil
	}
	p, err := cost.Read(file)
	if err != nil {
		return nil, err
	}
	if err := p.CheckMachine(cost.Here(experiments.BuildVersion().String())); err != nil {
		return nil, err
	}
	return p, nil
}

// runPlan is `fabric run --plan`: the run priced point by point, no lab
// built. A profile that no longer stands for the machine is used with a
// warning; without any, it says how to measure one.
// planFlags are the flags of `fabric run --plan`.
type planFlags struct {
	seed    uint64
	maxWall time.Duration
	asJSON  bool
}

func runPlan(cmd *cobra.Command, spec *experiments.Spec, p *cost.Profile, f planFlags) error {
	if p == nil {
		var why string
		var err error
		if p, why, err = experiments.MachineProfile(cmd.Context(), false, ""); err != nil {
			return err
		}
		if p == nil {
			if _, statErr := os.Stat(cost.Path()); statErr != nil {
				return exitError{code: exitFailure, msg: why + ": fabric doctor --calibrate measures this machine (under a minute)"}
			}
			if p, err = cost.Read(cost.Path()); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "warning: the machine profile is stale (%s): fabric doctor --calibrate measures it again\n", why)
		}
	}
	plan, err := spec.Plan(experiments.PlanOptions{Profile: p, Seed: f.seed, MaxWall: f.maxWall})
	var we *experiments.WallError
	if err != nil && !errors.As(err, &we) {
		return err
	}
	if f.asJSON {
		enc := json.NewEncoder(cmd.OutOrStdout())
		enc.SetIndent("", "  ")
		if err := enc.Encode(plan); err != nil {
			return err
		}
	} else {
		printPlan(cmd.OutOrStdout(), spec, plan)
	}
	if we != nil {
		return badInput(err)
	}
	return nil
}

// printPlan prints a run's plan as a table, what scale auto chose and
// why, and the run's wall-clock time.
func printPlan(w io.Writer, spec *experiments.Spec, plan *experiments.RunPlan) {
	variant := ""
	if spec.IsQuick {
		variant = " (quick)"
	}
	fmt.Fprintf(w, "plan for %s%s, scale %s\nmachine profile: %s\n\n", spec.Name, variant, plan.Scale, plan.Profile)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "point\ts\tmessages\tport pps\tline pps\tcapture pps\tCPU mean\tpeak\tverdict\ttrial")
	for _, p := range plan.Points {
		cpu := fmt.Sprintf("%.0f %%", p.MeanPct)
		if p.Uncalibrated {
			cpu += " (tcp's cost)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%.0f %%\t%s\t%s\n", p.Point, scaleText(p.Scale), p.Messages,
			pps(p.PortPPS, p.Port), pps(p.LinePPS, p.Line), pps(p.CapturePPS, p.Capture), cpu, p.PeakPct, p.Verdict,
			time.Duration(p.TrialS*1e9).Round(100*time.Millisecond))
	}
	tw.Flush()
	var why []string
	seen := map[string]bool{}
	for _, p := range plan.Points {
		if p.Why != "" && !seen[p.Traffic] {
			seen[p.Traffic] = true
			why = append(why, fmt.Sprintf("  %s: s = %s: %s", p.Traffic, scaleText(p.Scale), p.Why))
		}
	}
	if len(why) > 0 {
		fmt.Fprintf(w, "\nscale auto (the least s whose busiest window is at most %.0f %% of the cores, whose delay lines' packets are "+
			"twice their loop's cost apart, and at which this machine's timer keeps within the lines' limit):\n%s\n",
			plan.PeakLimitPct, strings.Join(why, "\n"))
	}
	for _, n := range plan.Notes {
		fmt.Fprintf(w, "\nnote: %s\n", n)
	}
	trials := 0
	for _, p := range plan.Points {
		trials += p.Trials
	}
	noun := "trials"
	if trials == 1 {
		noun = "trial"
	}
	fmt.Fprintf(w, "\nwall time: %s for %d %s\n", time.Duration(plan.WallS*1e9).Round(time.Second), trials, noun)
}

func scaleText(s float64) string {
	if s == 0 {
		return "–"
	}
	return strconv.FormatFloat(s, 'g', -1, 64)
}

// pps is a busiest figure and what it is, or a dash.
func pps(v float64, what string) string {
	if v == 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f (%s)", v, what)
}
