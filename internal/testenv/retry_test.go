package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// recorder is a testing.TB that keeps what a test would print.
type recorder struct {
	testing.TB
	logs, errs, skips []string
}

func (r *recorder) Helper()                        {}
func (r *recorder) Logf(format string, a ...any)   { r.logs = append(r.logs, format) }
func (r *recorder) Error(a ...any)                 { r.errs = append(r.errs, "error") }
func (r *recorder) Errorf(format string, a ...any) { r.errs = append(r.errs, format) }
func (r *recorder) Fatal(a ...any)                 { panic("fatal") }
func (r *recorder) Skipf(format string, a ...any) {
	r.skips = append(r.skips, fmt.Sprintf(format, a...))
}

// machineSays makes every attempt's watcher report m, for the test's
// length.
func machineSays(t *testing.T, m Machine) {
	real, realSettle := watchMachine, settle
	watchMachine = func() func() Machine { return func() Machine { return m } }
	settle = func(testing.TB) {}
	t.Cleanup(func() { watchMachine, settle = real, realSettle })
}

// After a stalled attempt the next waits for a calm window: windows that
// stall are waited out, for calmWait at most.
func TestSettleWaitsForACalmWindow(t *testing.T) {
	realWatch, realWindow, realWait := watchMachine, calmWindow, calmWait
	t.Cleanup(func() { watchMachine, calmWindow, calmWait = realWatch, realWindow, realWait })
	calmWindow, calmWait = time.Millisecond, time.Hour
	windows := []Machine{{StealPct: 9}, {LongestStall: time.Millisecond}, {SaturatedPct: 10}, {LongestStall: 100 * time.Microsecond}}
	seen := 0
	watchMachine = func() func() Machine {
		return func() Machine { seen++; return windows[min(seen, len(windows))-1] }
	}
	r := &recorder{TB: t}
	settle(r)
	if seen != len(windows) || len(r.logs) != 1 || !strings.Contains(r.logs[0], "was calm") {
		t.Errorf("settled after %d windows (%q), want after the %d-th, the first calm one", seen, r.logs, len(windows))
	}
	calmWait, seen, windows = 5*time.Millisecond, 0, windows[:1]
	r = &recorder{TB: t}
	settle(r)
	if len(r.logs) != 1 || !strings.Contains(r.logs[0], "not calm within") {
		t.Errorf("a machine that never calms: %q, want a note that the wait ran out", r.logs)
	}
}

// A failure on a machine that did not stall is not retried: the test
// fails after the first attempt, and says so.
func TestRetryFailsAtOnceWithoutAStall(t *testing.T) {
	machineSays(t, Machine{StealPct: 1, SaturatedPct: 5, LongestStall: time.Millisecond})
	r := &recorder{TB: t}
	ran := 0
	Retry(r, 3, 5*time.Millisecond, func(a *Attempt) {
		ran++
		a.Errorf("rate %d", a.N)
	})
	if ran != 1 || len(r.errs) != 2 || !strings.Contains(r.errs[1], "without a measured stall") {
		t.Errorf("ran %d attempts, errors %q; want 1 attempt and a failure without a stall", ran, r.errs)
	}
}

// Each kind of stall justifies a retry, and the retry names it; an
// attempt that passes ends the test.
func TestRetryOnlyForAMeasuredStall(t *testing.T) {
	for _, c := range []struct {
		name string
		m    Machine
		own  string
		want string
	}{
		{"steal", Machine{StealPct: 12}, "", "hypervisor took 12.0 %"},
		{"saturation", Machine{SaturatedPct: 40}, "", "saturated in 40 %"},
		{"timer", Machine{LongestStall: 30 * time.Millisecond}, "", "held back 30ms"},
		{"the attempt's own", Machine{}, "delay line 9ms late", "delay line 9ms late"},
	} {
		machineSays(t, c.m)
		r := &recorder{TB: t}
		ran := 0
		Retry(r, 3, 5*time.Millisecond, func(a *Attempt) {
			ran++
			if a.N < 2 {
				if c.own != "" {
					a.Stalled("%s", c.own)
				}
				a.Fatalf("attempt %d", a.N)
				t.Error("Fatalf did not end the attempt")
			}
		})
		if ran != 2 || len(r.errs) != 0 || len(r.logs) != 2 {
			t.Errorf("%s: ran %d, errors %v, logs %v; want a retry that passes", c.name, ran, r.errs, r.logs)
		}
	}
	// A stall within the check's tolerance is none.
	machineSays(t, Machine{LongestStall: 3 * time.Millisecond})
	r := &recorder{TB: t}
	ran := 0
	Retry(r, 3, 5*time.Millisecond, func(a *Attempt) { ran++; a.Errorf("late") })
	if ran != 1 {
		t.Errorf("a 3 ms stall against a 5 ms tolerance was retried (%d attempts)", ran)
	}
}

// Every attempt failing during stalls that code can cause (saturation)
// fails the test with the last attempt's failures and its stall.
func TestRetryFailsWhenEveryAttemptFails(t *testing.T) {
	machineSays(t, Machine{SaturatedPct: 40, LongestStall: 30 * time.Millisecond})
	r := &recorder{TB: t}
	ran := 0
	Retry(r, 3, 0, func(a *Attempt) {
		ran++
		a.Errorf("rate %d", a.N)
		a.Errorf("latency %d", a.N)
	})
	if ran != 3 || len(r.errs) != 3 || !strings.HasPrefix(r.errs[2], "all %d attempts failed") {
		t.Errorf("failing every attempt: ran %d, errors %v", ran, r.errs)
	}
}

// Every attempt failing while the hypervisor took the CPU (by the watcher,
// or by what the attempt measured on the CPU it used) leaves the check not
// judged: a skip, not a pass, and a line for CI to print; a single
// attempt without steal among them makes it a failure again.
func TestRetryLeavesUnjudgedWhatStealSpoiledEveryTime(t *testing.T) {
	proof := filepath.Join(t.TempDir(), "proof")
	t.Setenv(EnvCIProof, proof)
	machineSays(t, Machine{StealPct: 12})
	r := &recorder{TB: t}
	ran := 0
	Retry(r, 2, 0, func(a *Attempt) { ran++; a.Errorf("rate %d", a.N) })
	line, _ := os.ReadFile(proof + ".unjudged")
	if ran != 2 || len(r.errs) != 0 || len(r.skips) != 1 || !strings.Contains(string(line), t.Name()+": the hypervisor took more than 5 %") {
		t.Errorf("steal in every attempt: ran %d, errors %q, skips %q, CI's line %q; want 2 attempts, one skip, no error", ran, r.errs, r.skips, line)
	}
	machineSays(t, Machine{StealPct: 1})
	r = &recorder{TB: t}
	Retry(r, 2, 0, func(a *Attempt) { a.Stolen("lines' CPU stolen %d", a.N); a.Errorf("rate %d", a.N) })
	if len(r.errs) != 0 || len(r.skips) != 1 {
		t.Errorf("steal the attempts measured on one CPU: errors %q, skips %q; want one skip", r.errs, r.skips)
	}
	seen := 0
	real := watchMachine
	watchMachine = func() func() Machine {
		seen++
		if seen == 1 {
			return func() Machine { return Machine{SaturatedPct: 40} }
		}
		return func() Machine { return Machine{StealPct: 12} }
	}
	t.Cleanup(func() { watchMachine = real })
	r = &recorder{TB: t}
	Retry(r, 2, 0, func(a *Attempt) { a.Errorf("rate %d", a.N) })
	if len(r.skips) != 0 || len(r.errs) == 0 {
		t.Errorf("saturation, then steal: skips %q, errors %q; want a failure", r.skips, r.errs)
	}
}

// The real watcher's figures are shares and a positive overrun: every
// sleep wakes after its time, never before.
func TestWatcherMeasures(t *testing.T) {
	finish := watchMachine()
	time.Sleep(300 * time.Millisecond)
	m := finish()
	t.Logf("an idle 300 ms: %v", m)
	if m.StealPct < 0 || m.StealPct > 100 || m.SaturatedPct < 0 || m.SaturatedPct > 100 || m.LongestStall <= 0 {
		t.Errorf("inconsistent: %+v", m)
	}
}

// A stall of the test process's own scheduler is told from the kernel's:
// on one processor, a goroutine that spins for 100 ms keeps the woken
// watcher waiting for it until Go preempts the spinner (every 10 ms).
func TestWatcherTellsTheProcessesOwnStall(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	finish := watchMachine()
	time.Sleep(10 * time.Millisecond) // the watcher is napping
	for end := time.Now().Add(100 * time.Millisecond); time.Now().Before(end); {
	}
	m := finish()
	if m.LongestStall < time.Millisecond || !m.StallInProcess {
		t.Errorf("a spinning goroutine on the only processor: %v, in the process %v; want a stall of the process's own", m, m.StallInProcess)
	}
}

// judged is a trial's fidelity record as the judge gives it.
type judged struct{ faithful, stolen bool }

func (j judged) Faithful() bool { return j.faithful }
func (j judged) Stolen() bool   { return j.stolen }
func (j judged) Flags() string {
	return map[bool]string{true: "steal", false: "cpu-saturated"}[j.stolen]
}

// A trial the judge flagged for steal is a stall the hypervisor made, which
// leaves the check not judged when every attempt meets one; a trial
// flagged for anything else is a stall a regression can cause, which
// fails the test when it is every attempt's; a faithful trial is none.
func TestFlaggedTrialIsTheStallItsJudgeNames(t *testing.T) {
	t.Setenv(EnvCIProof, filepath.Join(t.TempDir(), "proof"))
	machineSays(t, Machine{StealPct: 1})
	for _, c := range []struct {
		f                judged
		errs, skips      int
		flagged, stalled bool
	}{
		{judged{stolen: true}, 0, 1, true, true},
		{judged{}, 2, 0, true, true},
		{judged{faithful: true}, 2, 0, false, false},
	} {
		r := &recorder{TB: t}
		var flagged, stalled bool
		Retry(r, 2, 0, func(a *Attempt) {
			flagged = a.Flagged("trial-1", c.f)
			stalled = len(a.stalls) > 0
			a.Errorf("rate %d", a.N)
		})
		if flagged != c.flagged || stalled != c.stalled || len(r.errs) != c.errs || len(r.skips) != c.skips {
			t.Errorf("%+v: flagged %v, stalled %v, errors %q, skips %q; want flagged %v, stalled %v, %d errors, %d skips",
				c.f, flagged, stalled, r.errs, r.skips, c.flagged, c.stalled, c.errs, c.skips)
		}
	}
}
