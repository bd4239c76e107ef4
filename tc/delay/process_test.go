package delay

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fabric-emu/fabric/internal/cpustat"
	"github.com/fabric-emu/fabric/internal/netnsutil"
	"github.com/fabric-emu/fabric/internal/testenv"
)

// startInScratch starts lines in a namespace of the test's own, with no
// interface: the queues and rules need none to bind.
func startInScratch(t *testing.T) *Loop {
	testenv.RequireRoot(t)
	if err := Check(); err != nil {
		testenv.SkipOrFail(t, "delay lines: "+err.Error())
	}
	path := netnsutil.Path(fmt.Sprintf("tdproc%d", os.Getpid()%100000), "_delay")
	if err := netnsutil.Create(path, func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { netnsutil.Remove(path) })
	w, err := Start(path, []Line{{Name: "a>b", In: "nosuch0", Delay: time.Millisecond, MTU: 1500}}, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Stop() })
	return w
}

// parentOf reads a process's parent, or 0 once it has gone.
func parentOf(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	ppid, _ := strconv.Atoi(strings.Fields(s[strings.LastIndexByte(s, ')')+2:])[1])
	return ppid
}

// The lines run in a child whose CPU counts as theirs, and which ends
// with Stop.
func TestLinesRunInAChildOfTheirOwn(t *testing.T) {
	w := startInScratch(t)
	pid := w.PID()
	if pid == os.Getpid() || parentOf(pid) != os.Getpid() {
		t.Fatalf("the lines' process %d has parent %d, want this test (%d)", pid, parentOf(pid), os.Getpid())
	}
	if !slices.Contains(cpustat.Helpers(), pid) || !Running() {
		t.Fatalf("the lines' process is not counted as the delay lines' (helpers %v, running %v)", cpustat.Helpers(), Running())
	}
	use, err := w.Use()
	if err != nil {
		t.Fatal(err)
	}
	loop := use.CPU
	// The whole process is at least its loop's thread, and more than
	// nothing: starting a Go program takes CPU.
	if whole := cpustat.LoopTimes()[cpustat.DelayLines] / cpustat.TicksPerSecond; whole <= 0 || whole < loop.Seconds() {
		t.Errorf("delay lines' account %.6f s, less than their loop's thread alone, %.6f s", whole, loop.Seconds())
	}
	if u, err := w.Use(); err != nil || u.CPU < loop || u.Verdict > u.CPU {
		t.Errorf("the loop's use %+v (%v): want at least its CPU read before, %v, and verdicts within it", u, err, loop)
	}
	if _, err := w.Stats(); err != nil {
		t.Fatal(err)
	}
	if err := w.Stop(); err != nil {
		t.Fatal(err)
	}
	if parentOf(pid) == os.Getpid() {
		t.Errorf("the lines' process %d still runs after Stop", pid)
	}
	if Running() || slices.Contains(cpustat.Helpers(), pid) {
		t.Errorf("stopped lines still counted as running")
	}
	if err := w.Err(); err == nil {
		t.Errorf("a stopped handle answers as if its lines ran")
	}
}

// A parent that dies without Stop leaves no lines behind: the child sees
// its socket close and ends.
func TestLinesEndWithTheirParent(t *testing.T) {
	w := startInScratch(t)
	pid := w.PID()
	w.conn.Close() // what the parent's death does to the socket
	done := make(chan error, 1)
	go func() { done <- w.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("the orphaned lines' process %d ended with %v, want a clean exit", pid, err)
		}
	case <-time.After(10 * time.Second):
		w.cmd.Process.Kill()
		t.Fatalf("the lines' process %d still runs 10 s after its socket closed", pid)
	}
	w.untrack(0)
	w.untrack = nil
	running.Add(-1)
}
