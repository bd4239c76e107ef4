// Package cluster spreads a sweep's independent trials over the machines
// of a batch cluster: it writes the trials' bundles into a directory every
// node shares, and reads the trials' progress back from it. The
// schedulers' own files are subpackages' (slurm, k8s); a lab never
// leaves its machine, so a trial is always one node's.
//
//	SHARED/cluster.json   how the sweep was submitted (scheduler, prefix, fabric, jobs)
//	SHARED/bundles/       one bundle per trial (experiments.WriteBundles), index.json
//	SHARED/results/       the run directory every trial writes into (fabric trial --out)
//	SHARED/logs/          the schedulers' logs, one per trial and the merge's
package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/fabric-emu/fabric/experiments"
	"github.com/fabric-emu/fabric/results/report"
)

// Dir is a sweep's shared directory.
type Dir string

// Bundles, Results and Logs are its parts.
func (d Dir) Bundles() string { return filepath.Join(string(d), "bundles") }
func (d Dir) Results() string { return filepath.Join(string(d), "results") }
func (d Dir) Logs() string    { return filepath.Join(string(d), "logs") }

// File is cluster.json: what resubmitting needs to know.
type File struct {
	Scheduler  string `json:"scheduler"` // slurm or k8s
	Experiment string `json:"experiment"`
	// Prefix names and labels every job of the sweep.
	Prefix string `json:"prefix"`
	// Fabric is the fabric command the nodes run.
	Fabric string `json:"fabric"`
	// Slurm's partition and time limit, Kubernetes' image, volume and
	// mount, when set.
	Partition string   `json:"partition,omitempty"`
	Time      string   `json:"time,omitempty"`
	Image     string   `json:"image,omitempty"`
	Volume    string   `json:"volume,omitempty"`
	Mount     string   `json:"mount,omitempty"`
	Deadline  string   `json:"deadline,omitempty"` // Kubernetes' Jobs' activeDeadline
	LabPrefix string   `json:"lab_prefix,omitempty"`
	Jobs      []string `json:"jobs,omitempty"`
}

const fileName = "cluster.json"

// Prepare writes spec's bundles into d (which must not exist, or be
// empty) and makes its results and logs directories; on an error it
// removes what it made.
func Prepare(ctx context.Context, spec *experiments.Spec, d Dir, opts experiments.BundleOptions) (*experiments.BundleIndex, error) {
	if entries, err := os.ReadDir(string(d)); err == nil && len(entries) > 0 {
		return nil, fmt.Errorf("--dir %s is %w: a sweep's shared directory is its own", d, experiments.ErrDirInUse)
	}
	opts.Dir = d.Bundles()
	idx, err := experiments.WriteBundles(ctx, spec, opts)
	if err == nil {
		err = errors.Join(os.MkdirAll(d.Results(), 0o755), os.MkdirAll(d.Logs(), 0o755))
	}
	if err != nil {
		os.RemoveAll(string(d))
		return nil, err
	}
	return idx, nil
}

// ReadFile reads d's cluster.json.
func ReadFile(d Dir) (*File, error) {
	b, err := os.ReadFile(filepath.Join(string(d), fileName))
	if err != nil {
		return nil, fmt.Errorf("%s is not a sweep's shared directory: %w", d, err)
	}
	var f File
	return &f, json.Unmarshal(b, &f)
}

// Write writes d's cluster.json.
func (f *File) Write(d Dir) error {
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(string(d), fileName), append(b, '\n'), 0o644)
}

// State is where a trial stands.
type State string

// A trial is done (COMPLETE), failed (INCOMPLETE), running (its
// directory exists, with neither) or pending (no directory yet).
const (
	Done    State = "done"
	Failed  State = "failed"
	Running State = "running"
	Pending State = "pending"
)

// Trial is one bundle's trial and where it stands.
type Trial struct {
	experiments.BundleRef
	State  State
	Reason string // a failed trial's INCOMPLETE
}

// Status reads every trial's state from d's results.
func Status(d Dir) ([]Trial, error) {
	idx, err := experiments.ReadBundleIndex(d.Bundles())
	if err != nil {
		return nil, err
	}
	out := make([]Trial, 0, len(idx.Bundles))
	for _, b := range idx.Bundles {
		t := Trial{BundleRef: b, State: Pending}
		dir := filepath.Join(d.Results(), b.Point, fmt.Sprintf("trial-%d", b.Trial))
		if _, err := os.Stat(filepath.Join(dir, "COMPLETE")); err == nil {
			t.State = Done
		} else if why, err := os.ReadFile(filepath.Join(dir, report.IncompleteFile)); err == nil {
			t.State, t.Reason = Failed, strings.TrimSpace(string(why))
		} else if _, err := os.Stat(dir); err == nil {
			t.State = Running
		}
		out = append(out, t)
	}
	return out, nil
}

// Missing are the indices of the trials that are neither done nor
// running: what a resubmission runs.
func Missing(trials []Trial) []int {
	var out []int
	for _, t := range trials {
		if t.State == Failed || t.State == Pending {
			out = append(out, t.Index)
		}
	}
	return out
}

// Counts says how many trials are in each state: "3 done, 1 failed".
func Counts(trials []Trial) string {
	n := map[State]int{}
	for _, t := range trials {
		n[t.State]++
	}
	var parts []string
	for _, s := range []State{Done, Running, Failed, Pending} {
		if n[s] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n[s], s))
		}
	}
	return fmt.Sprintf("%d trials: %s", len(trials), strings.Join(parts, ", "))
}

// Wait waits until no trial of d is pending or running, polling every
// interval, and returns their states; ctx ends it early.
func Wait(ctx context.Context, d Dir, interval time.Duration) ([]Trial, error) {
	for {
		trials, err := Status(d)
		if err != nil {
			return nil, err
		}
		busy := false
		for _, t := range trials {
			busy = busy || t.State == Pending || t.State == Running
		}
		if !busy {
			return trials, nil
		}
		select {
		case <-ctx.Done():
			return trials, ctx.Err()
		case <-time.After(interval):
		}
	}
}

// IndexList is indices as Slurm's --array and fabric trial's --pick
// write them: "0,3,7".
func IndexList(indices []int) string {
	parts := make([]string, len(indices))
	for i, v := range indices {
		parts[i] = strconv.Itoa(v)
	}
	return strings.Join(parts, ",")
}

// Quote quotes s for a POSIX shell.
func Quote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
