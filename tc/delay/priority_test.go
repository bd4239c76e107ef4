package delay

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fabric-emu/fabric/internal/testenv"
)

// policyOf reads a thread's scheduling policy (field 41 of its stat file).
func policyOf(pid, tid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/stat", pid, tid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	return strconv.Atoi(fields[41-3])
}

// The lines' loop runs at real time, as its stats say, and only its
// thread: the child's runtime and its answers stay in the normal class.
func TestLoopRunsAtRealTime(t *testing.T) {
	w := startInScratch(t)
	s, err := w.Stats()
	if err != nil {
		t.Fatal(err)
	}
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", w.PID()))
	if err != nil {
		t.Fatal(err)
	}
	fifo := 0
	for _, e := range tasks {
		tid, _ := strconv.Atoi(e.Name())
		if p, err := policyOf(w.PID(), tid); err == nil && p == unix.SCHED_FIFO {
			fifo++
		}
	}
	if !s.Realtime || fifo != 1 {
		t.Fatalf("stats say real time %v, and %d of the child's %d threads run SCHED_FIFO; want true and 1", s.Realtime, fifo, len(tasks))
	}
	if s.Demoted != 0 {
		t.Errorf("an idle loop was demoted for %v", s.Demoted)
	}
}

// A loop thread busier than demoteAbove over a window leaves real time,
// and returns once a window finds it below promoteBelow; the time out of
// it is counted.
func TestSaturatedLoopLeavesRealTime(t *testing.T) {
	testenv.RequireRoot(t)
	type result struct {
		afterBusy, afterRest   int
		demotions              uint64
		demoted, busy, resting time.Duration
		err                    error
	}
	done := make(chan result)
	go func() {
		runtime.LockOSThread() // the thread ends with the goroutine: its class goes with it
		var r result
		if err := setRealtime(true); err != nil {
			r.err = err
			done <- r
			return
		}
		var p priority
		t0 := time.Now()
		p.start(true, t0.UnixNano())
		for time.Since(t0) < time.Duration(priorityWindow)*3/2 { // busy: every ns on the CPU
		}
		now := time.Now().UnixNano()
		p.check(now)
		r.busy = time.Since(t0)
		r.afterBusy, _ = policyOf(os.Getpid(), unix.Gettid())
		t1 := time.Now()
		time.Sleep(time.Duration(priorityWindow) * 3 / 2) // resting: next to nothing
		p.check(time.Now().UnixNano())
		r.resting = time.Since(t1)
		r.afterRest, _ = policyOf(os.Getpid(), unix.Gettid())
		r.demotions, r.demoted = p.demotions.Load(), p.demoted(time.Now().UnixNano())
		done <- r
	}()
	r := <-done
	if r.err != nil {
		testenv.SkipOrFail(t, "real-time priority refused: "+r.err.Error())
	}
	if r.afterBusy != unix.SCHED_NORMAL || r.afterRest != unix.SCHED_FIFO || r.demotions != 1 {
		t.Fatalf("policy after a busy window %d (want %d), after a resting one %d (want %d), demotions %d (want 1)",
			r.afterBusy, unix.SCHED_NORMAL, r.afterRest, unix.SCHED_FIFO, r.demotions)
	}
	// Demoted from the busy window's check to the resting one's: the
	// resting window, and no more than it and the check's own time.
	if r.demoted < r.resting*9/10 || r.demoted > r.resting+10*time.Millisecond {
		t.Errorf("counted %v out of real time, want the resting window's %v", r.demoted, r.resting)
	}
}
