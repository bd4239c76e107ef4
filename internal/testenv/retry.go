package testenv

import (
	"fmt"
	"strings"
	"testing"
)

// Attempt is one try of a check whose verdict a busy machine can spoil (a
// rate, a latency percentile, a timer's effect): it gathers the check's
// failures instead of failing the test, so that Retry can try again.
// Setup that fails should fail the test through T, at once: no retry
// mends a broken lab.
type Attempt struct {
	T testing.TB
	// N counts attempts from 1, for a fresh port or name per attempt.
	N        int
	failures []string
}

// abortAttempt is what Fatalf panics with to end an attempt; Retry
// recovers it.
type abortAttempt struct{}

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

// Retry runs try until an attempt records no failure, at most n times.
// Every failed attempt is logged with the share of the CPU the hypervisor
// took during it, and the last one's failures fail t. A check that fails
// every time still fails: Retry forgives a machine's bad moments (a
// virtual machine on a busy host stalls for milliseconds), not a wrong
// result, though it does forgive a result that is wrong only now and then.
func Retry(t testing.TB, n int, try func(a *Attempt)) {
	t.Helper()
	for i := 1; i <= n; i++ {
		a := &Attempt{T: t, N: i}
		cpu0 := ReadCPU(t)
		a.run(try)
		cpu, _ := ReadCPU(t).Since(cpu0)
		if !a.Failed() {
			if i > 1 {
				t.Logf("attempt %d of %d passed", i, n)
			}
			return
		}
		if i < n {
			t.Logf("attempt %d of %d failed, with %.1f %% of the CPU stolen by the hypervisor: %s; trying again",
				i, n, cpu.StealPct, strings.Join(a.failures, "; "))
			continue
		}
		for _, f := range a.failures {
			t.Error(f)
		}
		t.Errorf("all %d attempts failed; the hypervisor took %.1f %% of the CPU during the last", n, cpu.StealPct)
	}
}
