package experiments

import (
	"cmp"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fabric-emu/fabric/emu/emutest"
	"github.com/fabric-emu/fabric/hosts/transport"
	"github.com/fabric-emu/fabric/internal/testenv"
	"github.com/fabric-emu/fabric/results/report"
)

// rerunExperiment is reproExperiment with reruns.
var rerunExperiment = strings.Replace(reproExperiment, "duration: 3s\n", "duration: 3s\nreruns: 2\n", 1)

// A trial the fidelity monitor flags is set aside and run again with its
// seed: the test saturates both cores until the runner says it set the
// first run aside. The flagged run is kept under set-aside/, counted by
// no result, and drew the same messages as the run that counts; the
// runner stops rerunning once a run is faithful; report.md says what was
// set aside; --resume counts the set-aside runs again and runs nothing.
func TestFlaggedTrialIsRerunWithItsSeed(t *testing.T) {
	testenv.RequireRoot(t)
	spec, err := Parse("rerun.yaml", []byte(rerunExperiment), "")
	if err != nil {
		t.Fatal(err)
	}
	prefix := emutest.Prefix(t, "t7f")
	var progress syncBuffer
	// Busy loops on every core, idle ~0 %, which the monitor flags. They
	// are processes of their own: goroutines here would spin only on what
	// this binary's scheduler gives them, and once left idle above the
	// monitor's floor (a CI run: the first trial judged faithful).
	var spinners []*exec.Cmd
	var once sync.Once
	stopped := make(chan struct{})
	stopSpinners := func() {
		once.Do(func() {
			for _, c := range spinners {
				c.Process.Kill()
				c.Wait()
			}
			close(stopped)
		})
	}
	defer stopSpinners()
	for range runtime.NumCPU() {
		c := exec.Command("sh", "-c", "while :; do :; done")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		spinners = append(spinners, c)
	}
	go func() {
		for !strings.Contains(progress.String(), "set aside as") {
			select {
			case <-stopped:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
		stopSpinners()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := Run(ctx, spec, Options{Out: t.TempDir(), LabPrefix: prefix, Seed: 5, Progress: &progress})
	stopSpinners()
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	t.Logf("progress:\n%s", progress.String())
	var cpus unix.CPUSet
	unix.SchedGetaffinity(0, &cpus)
	t.Logf("this binary's runtime: GOMAXPROCS %d, its thread allowed %d of %d CPUs", runtime.GOMAXPROCS(0), cpus.Count(), runtime.NumCPU())
	if res.SetAside < 1 || res.SetAside > spec.Reruns {
		t.Fatalf("%d runs set aside, want 1 to %d (reruns)", res.SetAside, spec.Reruns)
	}
	if len(res.Trials) != 1 {
		t.Fatalf("%d trials counted, want 1: a set-aside run counts in no result", len(res.Trials))
	}
	kept := res.Trials[0]
	if kept.Dir != filepath.Join(res.Dir, "tcp", "trial-1") {
		t.Errorf("counted trial %s, want tcp/trial-1", kept.Dir)
	}
	// The loop stops at a faithful run or when the reruns are spent.
	if res.SetAside < spec.Reruns && !kept.Fidelity.Faithful() {
		t.Errorf("%d of %d reruns used, yet the counted run is flagged (%s)", res.SetAside, spec.Reruns, kept.Fidelity.Flags())
	}
	first, err := report.LoadTrial(filepath.Join(res.Dir, report.SetAsideDir, "tcp", "trial-1.1"))
	if err != nil {
		t.Fatal(err)
	}
	if !first.Fidelity.CPUSaturated {
		t.Errorf("the first run, set aside while both cores spun, was not flagged cpu-saturated (%s)", first.Fidelity.Flags())
	}
	// The same seed: the same schedule, every message of it.
	a, b := scheduleOf(t, first.Dir), scheduleOf(t, kept.Dir)
	if len(a) < 3 || !slices.Equal(a, b) {
		t.Fatalf("the set-aside run's schedule has %d messages, the counted run's %d, and they differ: the rerun drew other messages", len(a), len(b))
	}
	if md, err := os.ReadFile(filepath.Join(res.Dir, "report.md")); err != nil || !strings.Contains(string(md), "set aside") {
		t.Errorf("report.md does not say runs were set aside (%v)", err)
	}
	again, err := Run(ctx, spec, Options{Resume: res.Dir, LabPrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	if again.Skipped != 1 || again.SetAside != res.SetAside || len(again.Trials) != 1 {
		t.Errorf("resume: skipped %d, set aside %d, trials %d; want 1, %d, 1", again.Skipped, again.SetAside, len(again.Trials), res.SetAside)
	}
}

// scheduleOf is a trial's whole schedule, every host's, in ID order.
func scheduleOf(t *testing.T, dir string) []transport.Message {
	t.Helper()
	sched, err := transport.ReadScheduleDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]transport.Message, 0, len(sched))
	for _, m := range sched {
		out = append(out, m)
	}
	slices.SortFunc(out, func(x, y transport.Message) int { return cmp.Compare(x.ID, y.ID) })
	return out
}
