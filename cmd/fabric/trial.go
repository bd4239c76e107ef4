package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fabric-emu/fabric/experiments"
)

func init() { addCommand(trialCmd) }

// trialCmd is `fabric trial BUNDLE --out DIR`: one trial of a sweep,
// from its bundle, on this machine.
func trialCmd() *cobra.Command {
	var out, profile, pick, labPrefix string
	var index int
	var keepPcaps bool
	c := &cobra.Command{
		Use:   "trial BUNDLE --out DIR",
		Short: "Run one trial from its bundle (fabric run --bundle) into a run directory",
		Long: `Run the trial a bundle holds (fabric run FILE --bundle DIR, fabric cluster …) as
fabric run runs it, into DIR/POINT/trial-N/, and DIR/run.json when DIR has none,
so that fabric report reads DIR as a run; trials of one sweep may share DIR.
meta.json records this machine (its name, CPU, kernel, profile). A bundle runs
only on the fabric build that wrote it, and only when this build draws its
schedule byte for byte. With --index N, BUNDLE is the directory of a sweep's
bundles (index.json) and N picks one: a Slurm array task's or a Kubernetes
Job's completion index.`,
		Example: `  fabric trial bundles/0003-dctcp-30k_load40-trial-1 --out results/
  fabric trial /shared/bundles --index "$SLURM_ARRAY_TASK_ID" --out /shared/results`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := args[0]
			if cmd.Flags().Changed("index") {
				var err error
				if index, err = pickIndex(index, pick); err != nil {
					return badInput(err)
				}
				if dir, err = experiments.BundleAt(dir, index); err != nil {
					return badInput(err)
				}
			}
			p, err := profileFlag(profile)
			if err != nil {
				return err
			}
			t0 := time.Now()
			opts := experiments.Options{Out: out, Progress: cmd.ErrOrStderr(), KeepPcaps: keepPcaps, Profile: p, LabPrefix: labPrefix}
			trialDir, t, err := experiments.RunBundle(cmd.Context(), dir, opts)
			var be *experiments.BundleError
			switch {
			case errors.As(err, &be):
				return badInput(err)
			case errors.Is(err, experiments.ErrInterrupted):
				return exitError{code: 130, msg: err.Error()}
			case err != nil:
				return err
			}
			verdict := "faithful"
			if !t.Fidelity.Faithful() {
				verdict = "flagged: " + t.Fidelity.Flags()
			}
			rel, _ := filepath.Rel(out, trialDir)
			fmt.Fprintf(cmd.OutOrStdout(), "%s in %s: %s, %s\n", rel, out, verdict, time.Since(t0).Round(time.Second))
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&out, "out", "", "the run directory the trial goes into (required)")
	f.IntVar(&index, "index", 0, "BUNDLE is a sweep's bundle directory; run its bundle of this index")
	f.StringVar(&pick, "pick", "", "with --index i, run the i-th bundle of this list (\"3,7,9\": a resubmission's completions)")
	f.StringVar(&profile, "profile", "", "record this machine profile (JSON, from fabric doctor --calibrate) instead of the state directory's")
	f.StringVar(&labPrefix, "lab-prefix", "run", "start every lab's name with this")
	f.BoolVar(&keepPcaps, "keep-pcaps", false, "keep the LMM's packet captures after matching")
	c.MarkFlagRequired("out")
	return c
}

// writeBundles is `fabric run FILE --bundle DIR`.
func writeBundles(cmd *cobra.Command, spec *experiments.Spec, opts experiments.BundleOptions) error {
	t0 := time.Now()
	idx, err := experiments.WriteBundles(cmd.Context(), spec, opts)
	if errors.Is(err, experiments.ErrNotBundled) || errors.Is(err, experiments.ErrDirInUse) {
		return badInput(err)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%d trial bundles of %s (seed %d) in %s, %s; run each with: fabric trial %s --index N --out DIR\n",
		len(idx.Bundles), idx.Experiment, idx.Seed, opts.Dir, time.Since(t0).Round(time.Millisecond), opts.Dir)
	return nil
}

// pickIndex is the bundle index --index i and --pick LIST name: LIST's
// i-th entry, or i itself without a list.
func pickIndex(i int, list string) (int, error) {
	if list == "" {
		return i, nil
	}
	parts := strings.Split(list, ",")
	if i < 0 || i >= len(parts) {
		return 0, fmt.Errorf("--index %d: --pick lists %d bundles", i, len(parts))
	}
	n, err := strconv.Atoi(strings.TrimSpace(parts[i]))
	if err != nil {
		return 0, fmt.Errorf("--pick %q: %v", list, err)
	}
	return n, nil
}
