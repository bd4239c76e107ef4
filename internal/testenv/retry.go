package testenv

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fabric-emu/fabric/internal/cpustat"
)

// Attempt is one try of a check whose verdict a stalled machine can spoil
// (a rate, a latency percentile, a timer's effect): it gathers the check's
// failures instead of failing the test, so that Retry can try again when,
// and only when, the attempt measured a stall. Setup that fails should
// fail the test through T, at once: no retry mends a broken lab.
type Attempt struct {
	T testing.TB
	// N counts attempts from 1, for a fresh port or name per attempt.
	N        int
	failures []string
	stalls   []string
	stolen   bool
}

// abortAttempt is what Fatalf panics with to end an attempt; Retry
// recovers it.
type abortAttempt struct{}

// Helper marks the caller as a helper of the test.
func (a *Attempt) Helper() { a.T.Helper() }

// Logf logs to the test.
func (a *Attempt) Logf(format string, args ...any) {
	a.T.Helper()
	a.T.Logf(format, args...)
}

// Errorf records a failure of this attempt and goes on.
func (a *Attempt) Errorf(format string, args ...any) {
	a.failures = append(a.failures, fmt.Sprintf(format, args...))
}

// Fatalf records a failure of this attempt and ends it. Call it only from
// the attempt's own goroutine.
func (a *Attempt) Fatalf(format string, args ...any) {
	a.Errorf(format, args...)
	panic(abortAttempt{})
}

// Stalled records a stall that the attempt's own measurements show (a
// delay line late beyond the check's tolerance, a trial flagged for the
// CPU): evidence that justifies a retry of a failed attempt, as the
// machine watcher's is.
func (a *Attempt) Stalled(format string, args ...any) {
	a.stalls = append(a.stalls, fmt.Sprintf(format, args...))
}

// Stolen records a stall that the attempt's own measurements lay on the
// hypervisor (a trial whose delay lines' CPU lost more than StallStealPct
// to steal): a stall as Stalled's, and an attempt the hypervisor spoiled,
// as the watcher's machine-wide steal says, which an average over the
// cores can hide when the steal falls on one.
func (a *Attempt) Stolen(format string, args ...any) {
	a.Stalled(format, args...)
	a.stolen = true
}

// Judged is a trial's fidelity record as fabric's judge gives it
// (report.Fidelity).
type Judged interface {
	Faithful() bool
	Flags() string
	// Stolen says the judge laid the trial on the hypervisor's steal.
	Stolen() bool
}

// Flagged records the stall a trial's fidelity record shows, if any: one
// the hypervisor spoiled when the judge says so (Stolen), else one of the
// machine's. It says whether the trial was flagged.
func (a *Attempt) Flagged(trial string, f Judged) bool {
	switch {
	case f.Faithful():
		return false
	case f.Stolen():
		a.Stolen("trial %s was flagged: %s", trial, f.Flags())
	default:
		a.Stalled("trial %s was flagged: %s", trial, f.Flags())
	}
	return true
}

// Failed says whether the attempt has recorded a failure.
func (a *Attempt) Failed() bool { return len(a.failures) > 0 }

// run calls try, ending quietly on Fatalf.
func (a *Attempt) run(try func(*Attempt)) {
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(abortAttempt); !ok {
				panic(r)
			}
		}
	}()
	try(a)
}

// Machine is what the machine did during an attempt that can spoil a
// check with no fault of the code under test.
type Machine struct {
	// StealPct is the share of the CPU the hypervisor took.
	StealPct float64
	// SaturatedPct is the share of 100 ms samples in which the CPU was
	// saturated (cpustat.Saturated).
	SaturatedPct float64
	// LongestStall is the longest a watcher thread's short sleep overran:
	// how long the machine once kept a waiting thread from running.
	LongestStall time.Duration
	// StallInProcess says the longest stall was the test process's own: the
	// watcher's thread, woken, slept again waiting for Go's scheduler to
	// give it a processor, which the test's own goroutines (its senders
	// and samplers among them) had. Such a stall holds those goroutines'
	// timers back as well, so it spoils a check as the kernel's does.
	StallInProcess bool
}

// Stall thresholds: a failed attempt is retried only past one of them.
const (
	// StallStealPct: a hypervisor taking a twentieth of the CPU takes
	// timers and softirqs with it, beyond any rate or lateness margin a
	// check on a loaded 2-core machine can keep.
	StallStealPct = 5.0
	// StallSaturatedPct is the fidelity judge's rule for trials
	// (cpustat.SaturatedShare): past it the emulation is not faithful.
	StallSaturatedPct = 100 * cpustat.SaturatedShare
)

// stall says why m shows a stall for a check that tolerates tolerance of
// lateness, or "".
func (m Machine) stall(tolerance time.Duration) string {
	var why []string
	if m.StealPct > StallStealPct {
		why = append(why, fmt.Sprintf("the hypervisor took %.1f %% of the CPU (above %.0f %%)", m.StealPct, StallStealPct))
	}
	if m.SaturatedPct > StallSaturatedPct {
		why = append(why, fmt.Sprintf("the CPU was saturated in %.0f %% of samples (above %.0f %%)", m.SaturatedPct, StallSaturatedPct))
	}
	if tolerance > 0 && m.LongestStall > tolerance {
		where := ""
		if m.StallInProcess {
			where = ", by this process's Go scheduler"
		}
		why = append(why, fmt.Sprintf("a waiting thread was held back %v%s (the check tolerates %v)", m.LongestStall.Round(time.Microsecond), where, tolerance))
	}
	return strings.Join(why, "; ")
}

func (m Machine) String() string {
	return fmt.Sprintf("steal %.1f %%, saturated in %.0f %% of samples, longest stall %v",
		m.StealPct, m.SaturatedPct, m.LongestStall.Round(time.Microsecond))
}

// watchMachine watches the machine until the returned function is called,
// which returns what it saw. Retry runs one per attempt.
var watchMachine = func() func() Machine {
	w := &watcher{stop: make(chan struct{}), done: make(chan struct{})}
	w.first, _ = cpustat.Read()
	go w.sleepLoop()
	return w.finish
}

// watcher samples /proc/stat every sampleEvery and times its own short
// sleeps on a thread of its own.
type watcher struct {
	stop, done chan struct{}
	first      cpustat.Times
	mu         sync.Mutex
	m          Machine
	samples    int
	saturated  int
}

const (
	sampleEvery = 100 * time.Millisecond
	// napFor is the watcher's sleep: short enough to see a stall of a
	// millisecond, long enough to cost under 1 % of a core.
	napFor = 2 * time.Millisecond
)

func (w *watcher) sleepLoop() {
	defer close(w.done)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
	prev, err := cpustat.Read()
	nextSample := time.Now().Add(sampleEvery)
	for {
		select {
		case <-w.stop:
			return
		default:
		}
		at := time.Now()
		var r0, r1 unix.Rusage
		unix.Getrusage(unix.RUSAGE_THREAD, &r0)
		ts := unix.NsecToTimespec(napFor.Nanoseconds())
		unix.Nanosleep(&ts, nil)
		over := time.Since(at) - napFor
		unix.Getrusage(unix.RUSAGE_THREAD, &r1)
		w.mu.Lock()
		if over > w.m.LongestStall {
			// The nap is one voluntary switch; a second is the thread
			// parked until Go's scheduler had a processor for it.
			w.m.LongestStall, w.m.StallInProcess = over, r1.Nvcsw-r0.Nvcsw > 1
		}
		w.mu.Unlock()
		if now := time.Now(); err == nil && now.After(nextSample) {
			nextSample = now.Add(sampleEvery)
			cur, err2 := cpustat.Read()
			if share, ok := cur.Since(prev); err2 == nil && ok {
				w.mu.Lock()
				w.samples++
				if cpustat.Saturated(share) {
					w.saturated++
				}
				w.mu.Unlock()
				prev = cur
			}
		}
	}
}

func (w *watcher) finish() Machine {
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	if last, err := cpustat.Read(); err == nil {
		if share, ok := last.Since(w.first); ok {
			w.m.StealPct = share.StealPct
		}
	}
	if w.samples > 0 {
		w.m.SaturatedPct = 100 * float64(w.saturated) / float64(w.samples)
	}
	return w.m
}

// A stall comes and goes with the hypervisor's load, and an attempt begun
// inside one measures it again, so after a stalled attempt Retry waits
// for a calm window before the next, for at most calmWait: a second with
// steal at most 2 %, no saturated sample and no 2 ms nap held back past
// calmStall. The bound separates the machine's phases: on this project's
// 2-core VMs a calm second's longest held-back nap was 180 µs (fabric
// doctor's spinning thread), a stalled one's 990 µs.
var (
	calmWindow = time.Second
	calmWait   = 15 * time.Second
)

const calmStall = 300 * time.Microsecond

// calm says whether m, a calm window's, shows a machine fit to measure on.
func (m Machine) calm() bool {
	return m.StealPct <= 2 && m.SaturatedPct == 0 && m.LongestStall <= calmStall
}

// settle waits for a calm window, or calmWait, and says which came.
var settle = func(t testing.TB) {
	t.Helper()
	start := time.Now()
	for {
		finish := watchMachine()
		time.Sleep(calmWindow)
		m := finish()
		switch {
		case m.calm():
			t.Logf("the machine was calm after %v (%v)", time.Since(start).Round(100*time.Millisecond), m)
			return
		case time.Since(start) >= calmWait:
			t.Logf("the machine was not calm within %v (%v): trying again anyway", calmWait, m)
			return
		}
	}
}

// Retry runs try until an attempt records no failure, at most n times. A
// failed attempt is retried only when it measured a stall: its own
// evidence (Attempt.Stalled), or the machine's during it: steal above
// StallStealPct, saturation above StallSaturatedPct, or a waiting thread
// held back longer than tolerance, the lateness the check itself allows (0:
// no timing check). Every retry prints the stall that justified it; a
// failure without one fails the test at once, so that a regression that
// fails half the time fails half the time.
//
// When every attempt failed while the hypervisor took more than
// StallStealPct of the CPU, the check was never judged: the test is
// skipped as not judged (Unjudged), with each attempt's failures in its
// log. Steal is the one stall that no code under test causes on an idle
// host; saturation and a held-back thread can be a regression's own
// doing, so attempts that stalled only by those fail the test.
func Retry(t testing.TB, n int, tolerance time.Duration, try func(a *Attempt)) {
	t.Helper()
	stolen := 0
	for i := 1; i <= n; i++ {
		a := &Attempt{T: t, N: i}
		finish := watchMachine()
		a.run(try)
		m := finish()
		if !a.Failed() {
			if i > 1 {
				t.Logf("attempt %d of %d passed (%v)", i, n, m)
			}
			return
		}
		stalls := a.stalls
		if s := m.stall(tolerance); s != "" {
			stalls = append(stalls, s)
		}
		why := strings.Join(stalls, "; ")
		if m.StealPct > StallStealPct || a.stolen {
			stolen++
		}
		if why != "" && i < n {
			t.Logf("attempt %d of %d failed (%s) during a measured stall: %s; trying again",
				i, n, strings.Join(a.failures, "; "), why)
			settle(t)
			continue
		}
		if stolen == n {
			for _, f := range a.failures {
				t.Logf("not judged: %s", f)
			}
			Unjudged(t, fmt.Sprintf("the hypervisor took more than %.0f %% of the CPU in each of the %d attempts (the last: %v)", StallStealPct, n, m))
			return
		}
		for _, f := range a.failures {
			t.Error(f)
		}
		switch {
		case why == "":
			t.Errorf("attempt %d failed without a measured stall (%v): not retried", i, m)
		default:
			t.Errorf("all %d attempts failed; the last during a stall: %s", n, why)
		}
		return
	}
}

// Unjudged ends t as a check this machine could not judge, for why: a
// skip, and a line in the file next to CI's proof (EnvCIProof + ".unjudged")
// that .ci/run prints after the suite, so that no such skip goes unseen.
var Unjudged = func(t testing.TB, why string) {
	t.Helper()
	if p := os.Getenv(EnvCIProof); p != "" {
		if f, err := os.OpenFile(p+".unjudged", os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o666); err == nil {
			fmt.Fprintf(f, "%s: %s\n", t.Name(), why)
			f.Close()
		}
	}
	t.Skipf("not judged: %s", why)
}
