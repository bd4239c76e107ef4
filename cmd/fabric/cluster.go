package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/fabric-emu/fabric/experiments"
	"github.com/fabric-emu/fabric/experiments/cluster"
	"github.com/fabric-emu/fabric/experiments/cluster/k8s"
	"github.com/fabric-emu/fabric/experiments/cluster/slurm"
)

func init() { addCommand(clusterCmd) }

// clusterCmd is `fabric cluster`: a sweep's trials on a batch cluster.
func clusterCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "cluster",
		Short: "Run a sweep's trials on a Slurm or Kubernetes cluster, one node per trial (docs/cluster.md)",
		Long: `Write a sweep's trial bundles into a directory every node shares, with the
scheduler's files that run one trial per node and merge the report at the end;
follow and resume the sweep from that directory. A lab stays on one machine:
only the sweep's independent trials spread.`,
	}
	c.AddCommand(clusterSlurmCmd(), clusterK8sCmd(), clusterStatusCmd(), clusterMergeCmd())
	return c
}

// sweepFlags are the flags that choose and bundle the sweep.
type sweepFlags struct {
	dir, prefix, fabric, scale, profile, labPrefix string
	quick                                          bool
	seed                                           uint64
}

func (f *sweepFlags) add(c *cobra.Command) {
	fl := c.Flags()
	fl.StringVar(&f.dir, "dir", "", "the shared directory (required): bundles, results and logs go here, and every node must see it at this path")
	fl.StringVar(&f.prefix, "prefix", "", "name and label of every job (default fabric-NAME)")
	fl.StringVar(&f.fabric, "fabric", "", "the fabric command on the nodes (default: this binary's path; e.g. 'sudo -n /usr/local/bin/fabric')")
	fl.StringVar(&f.labPrefix, "lab-prefix", "", "start every trial's lab name with this (fabric trial --lab-prefix)")
	fl.BoolVar(&f.quick, "quick", false, "the experiment's quick variant")
	fl.Uint64Var(&f.seed, "seed", 0, "base seed (default: the file's, else from the clock)")
	fl.StringVar(&f.scale, "scale", "", "auto or a factor s, as fabric run --scale")
	fl.StringVar(&f.profile, "profile", "", "plan the sweep (scale auto's s) with this machine profile instead of the state directory's")
	c.MarkFlagRequired("dir")
}

// prepare bundles the sweep of name into the shared directory.
func (f *sweepFlags) prepare(cmd *cobra.Command, name, scheduler string) (*cluster.File, *experiments.BundleIndex, error) {
	spec, err := experiments.Select(name, f.quick, "")
	if err != nil {
		return nil, nil, err
	}
	if f.scale != "" {
		if err := spec.SetScale(f.scale); err != nil {
			return nil, nil, badInput(err)
		}
	}
	profile, err := profileFlag(f.profile)
	if err != nil {
		return nil, nil, err
	}
	dir, err := filepath.Abs(f.dir)
	if err != nil {
		return nil, nil, err
	}
	f.dir = dir
	idx, err := cluster.Prepare(cmd.Context(), spec, cluster.Dir(dir), experiments.BundleOptions{Seed: f.seed, Profile: profile, ScaleFlag: f.scale})
	if errors.Is(err, experiments.ErrNotBundled) || errors.Is(err, experiments.ErrDirInUse) {
		return nil, nil, badInput(err)
	}
	if err != nil {
		return nil, nil, err
	}
	cf := &cluster.File{Scheduler: scheduler, Experiment: spec.Name, Prefix: f.prefix, Fabric: f.fabric, LabPrefix: f.labPrefix}
	if cf.Prefix == "" {
		cf.Prefix = "fabric-" + strings.ReplaceAll(spec.Name, "/", "-")
	}
	if cf.Fabric == "" && scheduler == "slurm" {
		if cf.Fabric, err = os.Executable(); err != nil {
			return nil, nil, err
		}
	}
	return cf, idx, nil
}

func clusterSlurmCmd() *cobra.Command {
	var f sweepFlags
	var partition, limit string
	var submit bool
	var every time.Duration
	c := &cobra.Command{
		Use:   "slurm FILE --dir SHARED",
		Short: "Write a sweep's bundles and a Slurm job array (one whole node per trial) and a merge job; --submit runs them",
		Long: `Write the sweep's trial bundles into SHARED/bundles, and SHARED/trials.sbatch: a job
array with one task per trial, each on a whole node (--exclusive), running
fabric trial into SHARED/results; SHARED/report.sbatch, the job that merges the
report once every task has ended (submitted with --dependency=afterany); and
SHARED/submit.sh, which submits both. With --submit fabric submits them and
follows their progress (squeue) until the report is written, then prints the
jobs' accounting (sacct, or squeue's record where accounting is off).`,
		Example: `  fabric cluster slurm hull/dynamic --dir /shared/hull --submit
  fabric cluster slurm my.yaml --dir /shared/my --fabric 'sudo -n /usr/local/bin/fabric' --partition fabric`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cf, idx, err := f.prepare(cmd, args[0], "slurm")
			if err != nil {
				return err
			}
			cf.Partition, cf.Time = partition, limit
			job := slurmJob(cf, cluster.Dir(f.dir), len(idx.Bundles), nil)
			script, err := job.Write()
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%d trial bundles of %s in %s; %s runs them (or sbatch %s, then %s with --dependency=afterany)\n",
				len(idx.Bundles), idx.Experiment, f.dir, filepath.Join(f.dir, slurm.SubmitScript), script, slurm.MergeScript)
			if !submit {
				return cf.Write(cluster.Dir(f.dir))
			}
			return submitSlurm(cmd, cf, job, script, every)
		},
	}
	f.add(c)
	fl := c.Flags()
	fl.StringVar(&partition, "partition", "", "sbatch --partition")
	fl.StringVar(&limit, "time", "", "sbatch --time, each task's limit")
	fl.BoolVar(&submit, "submit", false, "submit the jobs with sbatch and follow them until the report is merged")
	fl.DurationVar(&every, "every", 5*time.Second, "with --submit, how often to ask squeue")
	return c
}

// slurmJob is the Slurm job of a sweep's shared directory.
func slurmJob(cf *cluster.File, d cluster.Dir, count int, indices []int) slurm.Job {
	return slurm.Job{Dir: d, Prefix: cf.Prefix, Fabric: cf.Fabric, Count: count, Indices: indices, Partition: cf.Partition, Time: cf.Time, LabPrefix: cf.LabPrefix}
}

// submitSlurm submits the array and its merge job, records them in
// cluster.json and follows them.
func submitSlurm(cmd *cobra.Command, cf *cluster.File, job slurm.Job, script string, every time.Duration) error {
	array, merge, err := slurm.Submit(cmd.Context(), job, script)
	if err != nil && array == "" {
		// Nothing runs: the bundles and scripts go, as a failed prepare's do.
		return errors.Join(err, os.RemoveAll(string(job.Dir)))
	}
	if err != nil {
		return err
	}
	cf.Jobs = append(cf.Jobs, array, merge)
	if err := cf.Write(job.Dir); err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	fmt.Fprintf(out, "submitted: trials job %s, report job %s (afterany:%s)\n", array, merge, array)
	if err := slurm.Follow(cmd.Context(), out, every, array, merge); err != nil && !errors.Is(err, slurm.ErrNoAccounting) {
		return err
	}
	trials, err := cluster.Status(job.Dir)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "%s; report: %s\n", cluster.Counts(trials), filepath.Join(job.Dir.Results(), "report.md"))
	if len(cluster.Missing(trials)) > 0 {
		return exitError{code: exitFailure, msg: "some trials did not complete: fabric cluster status " + string(job.Dir) + " --resubmit runs them again"}
	}
	return nil
}

func clusterK8sCmd() *cobra.Command {
	var f sweepFlags
	var volume, image, mount, namespace string
	var parallelism int
	var deadline time.Duration
	c := &cobra.Command{
		Use:   "k8s FILE --dir SHARED --volume NAME --image IMG",
		Short: "Write a sweep's bundles and a Kubernetes Indexed Job (one trial per node) with a merge Job",
		Long: `Write the sweep's trial bundles into SHARED/bundles and SHARED/k8s.yaml: an Indexed
Job with one completion per trial, each pod privileged in its own network
namespace, one per node (anti-affinity on the Job's label), its trial picked
by JOB_COMPLETION_INDEX, bundles and results on the PersistentVolumeClaim
NAME, mounted at --mount (default SHARED); and a Job that waits for every
trial to end and merges the report. Apply it with kubectl apply -f.`,
		Example: `  fabric cluster k8s hull/dynamic --dir /mnt/fabric/hull --volume fabric-shared --image registry.example/fabric:v1 --mount /shared`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if volume == "" || image == "" {
				return badInput(errors.New("--volume and --image are required"))
			}
			if f.fabric == "" {
				f.fabric = k8s.DefaultFabric
			}
			cf, idx, err := f.prepare(cmd, args[0], "k8s")
			if err != nil {
				return err
			}
			if mount == "" {
				mount = f.dir
			}
			cf.Image, cf.Volume, cf.Mount, cf.Deadline = image, volume, mount, deadline.String()
			job := k8s.Job{Prefix: cf.Prefix, Namespace: namespace, Image: image, Fabric: cf.Fabric, Volume: volume, Mount: mount,
				Count: len(idx.Bundles), Parallelism: parallelism, Deadline: deadline}
			path, err := writeManifest(f.dir, k8s.FileName, job)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%d trial bundles of %s in %s; kubectl apply -f %s runs them\n", len(idx.Bundles), idx.Experiment, f.dir, path)
			return cf.Write(cluster.Dir(f.dir))
		},
	}
	f.add(c)
	fl := c.Flags()
	fl.StringVar(&volume, "volume", "", "the PersistentVolumeClaim that holds SHARED (required)")
	fl.StringVar(&image, "image", "", "the fabric image (fabric image build, pushed where the nodes pull from; required)")
	fl.StringVar(&mount, "mount", "", "where the pods mount the volume (default: SHARED)")
	fl.StringVar(&namespace, "namespace", "", "the Jobs' namespace (default: kubectl's)")
	fl.IntVar(&parallelism, "parallelism", 4, "trials at once, each on a node of its own")
	fl.DurationVar(&deadline, "deadline", 24*time.Hour, "end each Job this long after it starts (activeDeadlineSeconds), whatever its pods did; 0: never")
	return c
}

// writeManifest writes job's manifest into dir as name.
func writeManifest(dir, name string, job k8s.Job) (string, error) {
	y, err := job.Manifest()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, name)
	return path, os.WriteFile(path, y, 0o644)
}

func clusterStatusCmd() *cobra.Command {
	var resubmit, wait bool
	var every time.Duration
	c := &cobra.Command{
		Use:   "status SHARED",
		Short: "Show a sweep's done, running, failed and pending trials; --resubmit runs only the missing ones again",
		Long: `Read every trial's state from the shared directory: done (COMPLETE), failed
(INCOMPLETE, with its reason), running (begun, neither) or pending (not begun).
--resubmit submits a new job with only the failed and pending trials (Slurm: an
array of exactly those indices and a merge job after it; Kubernetes: writes
k8s-resubmit-N.yaml, whose completions pick them). Resubmit once the sweep's
jobs have ended: a pending trial may still be queued.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			d := cluster.Dir(args[0])
			trials, err := cluster.Status(d)
			if wait && err == nil {
				trials, err = cluster.Wait(cmd.Context(), d, every)
			}
			if err != nil {
				return badInput(err)
			}
			printStatus(cmd, trials)
			if !resubmit {
				return nil
			}
			return resubmitMissing(cmd, d, cluster.Missing(trials), every)
		},
	}
	c.Flags().BoolVar(&resubmit, "resubmit", false, "submit the failed and pending trials again")
	c.Flags().BoolVar(&wait, "wait", false, "wait until no trial is pending or running")
	c.Flags().DurationVar(&every, "every", 5*time.Second, "how often to look again (--wait, and following a resubmission)")
	return c
}

// printStatus prints one line per trial that is not done, and the counts.
func printStatus(cmd *cobra.Command, trials []cluster.Trial) {
	w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "INDEX\tPOINT\tTRIAL\tSTATE\tREASON")
	for _, t := range trials {
		fmt.Fprintf(w, "%d\t%s\t%d\t%s\t%s\n", t.Index, t.Point, t.Trial, t.State, firstLine(t.Reason))
	}
	w.Flush()
	fmt.Fprintln(cmd.OutOrStdout(), cluster.Counts(trials))
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// resubmitMissing submits the missing trials with the sweep's scheduler.
func resubmitMissing(cmd *cobra.Command, d cluster.Dir, missing []int, every time.Duration) error {
	out := cmd.OutOrStdout()
	if len(missing) == 0 {
		fmt.Fprintln(out, "nothing to resubmit: every trial is done or running")
		return nil
	}
	cf, err := cluster.ReadFile(d)
	if err != nil {
		return badInput(err)
	}
	n := len(cf.Jobs)/2 + 1
	switch cf.Scheduler {
	case "slurm":
		job := slurmJob(cf, d, 0, missing)
		job.Script = fmt.Sprintf("trials-resubmit-%d.sbatch", n)
		script, err := job.Write()
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "resubmitting %d trial(s): %s\n", len(missing), cluster.IndexList(missing))
		return submitSlurm(cmd, cf, job, script, every)
	case "k8s":
		deadline, _ := time.ParseDuration(cf.Deadline) // written by fabric cluster k8s; none if absent
		job := k8s.Job{Prefix: fmt.Sprintf("%s-r%d", cf.Prefix, n), Image: cf.Image, Fabric: cf.Fabric, Volume: cf.Volume, Mount: cf.Mount,
			Pick: missing, Parallelism: len(missing), Deadline: deadline}
		path, err := writeManifest(string(d), fmt.Sprintf("k8s-resubmit-%d.yaml", n), job)
		if err != nil {
			return err
		}
		cf.Jobs = append(cf.Jobs, job.Prefix+"-trials", job.Prefix+"-report")
		fmt.Fprintf(out, "%d trial(s) (%s): kubectl apply -f %s runs them\n", len(missing), cluster.IndexList(missing), path)
		return cf.Write(d)
	}
	return badInput(fmt.Errorf("%s: unknown scheduler %q", d, cf.Scheduler))
}

func clusterMergeCmd() *cobra.Command {
	var wait bool
	var every time.Duration
	c := &cobra.Command{
		Use:   "merge SHARED",
		Short: "Merge the report of a sweep's trials (--wait: once none is pending or running)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			d := cluster.Dir(args[0])
			if wait {
				trials, err := cluster.Wait(cmd.Context(), d, every)
				if err != nil {
					return err
				}
				fmt.Fprintln(cmd.ErrOrStderr(), cluster.Counts(trials))
			}
			md, err := experiments.Report(d.Results())
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
	c.Flags().BoolVar(&wait, "wait", false, "wait until no trial is pending or running")
	c.Flags().DurationVar(&every, "every", 10*time.Second, "with --wait, how often to look")
	return c
}
