// Package slurm runs a sweep's trials as a Slurm job array: one array
// task per trial bundle, each on a whole node (--exclusive: a faithful
// trial needs the machine to itself), writing into the sweep's shared
// directory, and a job that merges their report once every task has
// ended (--dependency=afterany).
package slurm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fabric-emu/fabric/experiments/cluster"
)

// Job is what the scripts need.
type Job struct {
	Dir cluster.Dir
	// Prefix is every job's name (the merge job's with -report).
	Prefix string
	// Fabric is the fabric command on the nodes: one word, or a command
	// line such as "sudo -n /usr/local/bin/fabric".
	Fabric string
	// Indices are the bundles to run (all of Count when nil).
	Indices []int
	Count   int
	// Partition and Time are sbatch's --partition and --time, when set.
	Partition, Time string
	// LabPrefix starts the names of the trials' labs (fabric trial's
	// default when empty).
	LabPrefix string
	// Script is the array script's file name (ArrayScript unless set): a
	// resubmission's is its own.
	Script string
}

// Script and file names in the shared directory.
const (
	ArrayScript  = "trials.sbatch"
	MergeScript  = "report.sbatch"
	SubmitScript = "submit.sh"
)

// array is the --array value.
func (j Job) array() string {
	if j.Indices == nil {
		return fmt.Sprintf("0-%d", j.Count-1)
	}
	return cluster.IndexList(j.Indices)
}

// header is the #SBATCH lines every script starts with.
func (j Job) header(name, log string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "#!/bin/sh\n#SBATCH --job-name=%s\n#SBATCH --output=%s\n#SBATCH --chdir=%s\n#SBATCH --nodes=1\n#SBATCH --ntasks=1\n",
		name, log, j.Dir)
	if j.Partition != "" {
		fmt.Fprintf(&b, "#SBATCH --partition=%s\n", j.Partition)
	}
	if j.Time != "" {
		fmt.Fprintf(&b, "#SBATCH --time=%s\n", j.Time)
	}
	return b.String()
}

// Array is the job array's script: one task per trial, a whole node each.
func (j Job) Array() string {
	return j.header(j.Prefix, filepath.Join(j.Dir.Logs(), "trial-%a.log")) +
		fmt.Sprintf("#SBATCH --array=%s\n#SBATCH --exclusive\n", j.array()) +
		"# One trial per task, on a node of its own: its bundle is the task's index.\n" +
		fmt.Sprintf("exec %s trial %s --index \"$SLURM_ARRAY_TASK_ID\" --out %s%s\n", j.Fabric, cluster.Quote(j.Dir.Bundles()), cluster.Quote(j.Dir.Results()), j.labFlag())
}

// labFlag is fabric trial's --lab-prefix, when set.
func (j Job) labFlag() string {
	if j.LabPrefix == "" {
		return ""
	}
	return " --lab-prefix " + cluster.Quote(j.LabPrefix)
}

// Merge is the merge job's script: the report of every trial that ran.
func (j Job) Merge() string {
	return j.header(j.Prefix+"-report", filepath.Join(j.Dir.Logs(), "report.log")) +
		"# Submitted with --dependency=afterany on the array: it runs once every task has ended.\n" +
		fmt.Sprintf("exec %s report %s\n", j.Fabric, cluster.Quote(j.Dir.Results()))
}

// Submit is a shell script that submits both, as Submit does.
func (j Job) Submit() string {
	return "#!/bin/sh\nset -eu\n" +
		fmt.Sprintf("array=$(sbatch --parsable %s)\n", cluster.Quote(j.arrayPath())) +
		fmt.Sprintf("merge=$(sbatch --parsable --dependency=afterany:\"${array%%%%;*}\" %s)\n", cluster.Quote(filepath.Join(string(j.Dir), MergeScript))) +
		"echo \"trials: job ${array%%;*}, report: job ${merge%%;*}\"\n"
}

// arrayPath is the array script's path.
func (j Job) arrayPath() string {
	if j.Script == "" {
		j.Script = ArrayScript
	}
	return filepath.Join(string(j.Dir), j.Script)
}

// Write writes the scripts into the shared directory and returns the
// array script's path.
func (j Job) Write() (string, error) {
	array := j.arrayPath()
	for path, text := range map[string]string{array: j.Array(), filepath.Join(string(j.Dir), MergeScript): j.Merge(),
		filepath.Join(string(j.Dir), SubmitScript): j.Submit()} {
		if err := os.WriteFile(path, []byte(text), 0o755); err != nil {
			return "", err
		}
	}
	return array, nil
}

// Submit submits the array script and the merge job after it, and
// returns their job IDs; when the merge job is refused it cancels the
// array and returns no ID.
func Submit(ctx context.Context, j Job, array string) (arrayID, mergeID string, err error) {
	if arrayID, err = sbatch(ctx, array); err != nil {
		return "", "", err
	}
	mergeID, err = sbatch(ctx, filepath.Join(string(j.Dir), MergeScript), "--dependency=afterany:"+arrayID)
	if err != nil {
		// A sweep nothing would merge does not run: its array goes.
		_, cerr := run(context.WithoutCancel(ctx), "scancel", arrayID)
		return "", "", errors.Join(err, cerr)
	}
	return arrayID, mergeID, nil
}

// sbatch submits a script and returns its job ID.
func sbatch(ctx context.Context, script string, args ...string) (string, error) {
	out, err := run(ctx, "sbatch", append(append([]string{"--parsable"}, args...), script)...)
	if err != nil {
		return "", err
	}
	id, _, _ := strings.Cut(strings.TrimSpace(out), ";") // "ID;cluster" on a federation
	return id, nil
}

// run runs a Slurm client and returns its output, its stderr in the error.
func run(ctx context.Context, name string, args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	c := exec.CommandContext(ctx, name, args...)
	c.Stdout, c.Stderr = &stdout, &stderr
	if err := c.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// ended are the states of a job that will not run again.
var ended = []string{"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL", "DEADLINE"}

// Follow prints the jobs' progress (squeue, one line per change) until
// every task has ended, then their accounting (sacct, or squeue's record
// of ended jobs where accounting is off, which it says). It fails when a
// job did not complete.
func Follow(ctx context.Context, w io.Writer, every time.Duration, ids ...string) error {
	last := ""
	for {
		states, err := Queue(ctx, ids...)
		if err != nil {
			return err
		}
		line := countStates(states)
		if line != last {
			fmt.Fprintf(w, "%s  %s\n", time.Now().Format("15:04:05"), line)
			last = line
		}
		if allEnded(states) {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(every):
		}
	}
	Accounting(ctx, w, ids...)
	states, err := Queue(ctx, ids...)
	if err != nil {
		return err
	}
	var bad []string
	for task, s := range states {
		if s != "COMPLETED" {
			bad = append(bad, task+" "+s)
		}
	}
	if len(bad) > 0 {
		slices.Sort(bad)
		return fmt.Errorf("jobs that did not complete: %s", strings.Join(bad, ", "))
	}
	return nil
}

// Queue is every task of the jobs and its state, ended ones included
// while the controller remembers them (MinJobAge).
func Queue(ctx context.Context, ids ...string) (map[string]string, error) {
	out, err := run(ctx, "squeue", "-h", "-r", "--states=all", "-j", strings.Join(ids, ","), "-o", "%i|%T")
	if err != nil {
		return nil, err
	}
	states := map[string]string{}
	for line := range strings.Lines(out) {
		if id, st, ok := strings.Cut(strings.TrimSpace(line), "|"); ok {
			states[id] = st
		}
	}
	return states, nil
}

func allEnded(states map[string]string) bool {
	for _, s := range states {
		if !slices.Contains(ended, s) {
			return false
		}
	}
	return true
}

// countStates is "2 COMPLETED, 1 RUNNING, 1 PENDING".
func countStates(states map[string]string) string {
	n := map[string]int{}
	for _, s := range states {
		n[s]++
	}
	keys := make([]string, 0, len(n))
	for s := range n {
		keys = append(keys, s)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, s := range keys {
		parts[i] = fmt.Sprintf("%d %s", n[s], s)
	}
	return fmt.Sprintf("%d tasks: %s", len(states), strings.Join(parts, ", "))
}

// ErrNoAccounting is sacct's answer on a cluster without accounting.
var ErrNoAccounting = errors.New("slurm accounting is off")

// Accounting prints sacct's record of the jobs; where accounting is off
// it says so and prints squeue's record of them instead.
func Accounting(ctx context.Context, w io.Writer, ids ...string) error {
	// slurmctld sends a job's end to slurmdbd a moment after squeue shows it,
	// so sacct is asked again, for a few seconds, until it has every end.
	for try := 0; try < 10 && !sacctEnded(ctx, ids); try++ {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	out, err := run(ctx, "sacct", "-j", strings.Join(ids, ","), "--format=JobID,JobName%24,State,ExitCode,Elapsed,NodeList", "-X")
	if err == nil {
		fmt.Fprintf(w, "sacct:\n%s", out)
		return nil
	}
	fmt.Fprintf(w, "sacct failed (%v): accounting is off, so squeue's record of the ended jobs instead:\n", err)
	out, qerr := run(ctx, "squeue", "-r", "--states=all", "-j", strings.Join(ids, ","), "-o", "%.14i %.24j %.10T %.10M %.8r %N")
	fmt.Fprint(w, out)
	return errors.Join(ErrNoAccounting, qerr)
}

// sacctEnded is whether sacct records every task of the jobs as ended, or
// fails (as it does where accounting is off, which waiting cannot change).
func sacctEnded(ctx context.Context, ids []string) bool {
	out, err := run(ctx, "sacct", "-n", "-P", "-X", "-j", strings.Join(ids, ","), "--format=State")
	if err != nil {
		return true
	}
	for line := range strings.Lines(out) {
		// A cancelled job's state is "CANCELLED by UID".
		if f := strings.Fields(line); len(f) > 0 && !slices.Contains(ended, f[0]) {
			return false
		}
	}
	return true
}
