package delay

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// A delay line is a loop that must run when a packet is due. On a virtual
// machine it sometimes cannot: the hypervisor takes the vCPU away, and a
// timed sleep wakes late, the later the longer it slept. A lower load does
// not change that, so a trial flagged for lateness should say how much of
// it the machine showed idle.
// MeasureMachine measures it, with the loop's own thread settings, before
// a lab carries traffic.

// MachineTiming is how well this machine keeps time for a delay line's
// loop when nothing else runs.
type MachineTiming struct {
	// Margin is how early the loop would wake before a release, as it
	// measures it when it starts and then tracks it (nextMargin), after
	// the releases below.
	Margin time.Duration `json:"margin_ns"`
	// IdleLateP50 and IdleLateP99 are how late releases were when timed
	// as the loop times them (asleep until the margin before, then
	// spinning at most spinMax), each after a sleep of 50 µs to 1 ms: a
	// timed sleep here wakes later the longer it slept, and its tail is
	// lateness.
	IdleLateP50 time.Duration `json:"idle_late_p50_ns"`
	IdleLateP99 time.Duration `json:"idle_late_p99_ns"`
	// Stalled is the fraction of the spin during which the thread did not
	// run: gaps longer than stallMin between two consecutive clock reads.
	Stalled float64 `json:"stalled_fraction"`
	// LongestStall is the longest such gap.
	LongestStall time.Duration `json:"longest_stall_ns"`
	// StallFloorP99 is the 99th-percentile lateness of releases due at
	// random instants of the spin, had a loop spun without ever sleeping:
	// a release due inside a stall waits for its end.
	StallFloorP99 time.Duration `json:"stall_floor_p99_ns"`
	// FloorP99 is the larger of IdleLateP99 and StallFloorP99: the p99
	// lateness of a delay loop on this machine with nothing else running.
	// It is not a strict bound: a vCPU kept busy does not halt and its
	// timers can fire sooner. A lateness limit below it is at the
	// machine's own noise.
	FloorP99 time.Duration `json:"floor_p99_ns"`
	Spin     time.Duration `json:"spin_ns"` // how long the spin lasted
}

// stallMin is the shortest gap between two clock reads that counts as a
// stall: a read takes tens of ns, and a few µs is a cache or TLB miss away
// from noise; what a 50 µs limit cares about is far longer.
const stallMin = 5 * time.Microsecond

// releases is how many releases MeasureMachine times: six samples beyond
// the 99th percentile, about 350 ms of sleeps.
const releases = 600

// MeasureMachine times releases with the delay loop's own timer, then
// spins for spin reading the clock, on a thread set up as the loop's is
// (CPU, priority, timer slack).
func MeasureMachine(spin time.Duration) MachineTiming {
	out := make(chan MachineTiming)
	go func() {
		becomeLoopThread() // the thread exits with the goroutine
		var m MachineTiming
		var t timer
		t.margin.Store(int64(wakeMargin()))
		rng := rand.New(rand.NewPCG(1, 2)) // the waits' lengths; any spread will do
		late := make([]time.Duration, 0, releases)
		for range releases {
			due := time.Now().Add(50*time.Microsecond + time.Duration(rng.Int64N(int64(950*time.Microsecond))))
			t.until(due.UnixNano(), math.MaxInt64, nil) // a sleep's error is lateness here, measured below
			late = append(late, max(time.Since(due), 0))
		}
		m.Margin = time.Duration(t.margin.Load())
		slices.Sort(late)
		m.IdleLateP50, m.IdleLateP99 = late[len(late)/2], late[len(late)*99/100]
		var stalls []time.Duration
		start := time.Now()
		last := start
		for last.Sub(start) < spin {
			now := time.Now()
			if g := now.Sub(last); g > stallMin {
				stalls = append(stalls, g)
			}
			last = now
		}
		m.Spin = last.Sub(start)
		m.Stalled, m.LongestStall, m.StallFloorP99 = stallFloor(stalls, m.Spin, 0.99)
		m.FloorP99 = max(m.IdleLateP99, m.StallFloorP99)
		out <- m
	}()
	return <-out
}

// stallFloor summarises the stalls of a spin of length total: the stalled
// fraction, the longest stall, and the q-quantile of the lateness of a
// release due at a uniformly random instant. A release due inside a stall
// of length g, at a uniform point of it, is late by up to g, so the
// releases late by more than L are the fraction Σ max(g−L, 0) / total; the
// quantile is the least L (to 1 µs) that leaves at most 1−q of them.
func stallFloor(stalls []time.Duration, total time.Duration, q float64) (stalled float64, longest, floor time.Duration) {
	if total <= 0 {
		return 0, 0, 0
	}
	var sum time.Duration
	for _, g := range stalls {
		sum += g
		longest = max(longest, g)
	}
	beyond := func(l time.Duration) float64 {
		var s time.Duration
		for _, g := range stalls {
			s += max(g-l, 0)
		}
		return float64(s) / float64(total)
	}
	lo, hi := time.Duration(0), longest // beyond(longest) = 0
	for hi-lo > time.Microsecond {
		mid := (lo + hi) / 2
		if beyond(mid) <= 1-q {
			hi = mid
		} else {
			lo = mid
		}
	}
	if beyond(0) <= 1-q {
		hi = 0
	}
	return float64(sum) / float64(total), longest, hi
}

// String is one line for `fabric doctor`.
func (m MachineTiming) String() string {
	us := func(d time.Duration) float64 { return float64(d) / 1e3 }
	return fmt.Sprintf("an idle delay line released %.0f µs late (p50), %.0f µs (p99), waking %.0f µs early; "+
		"a spinning thread stalled %.1f %% of %v, longest %.0f µs: p99 lateness floor %.0f µs",
		us(m.IdleLateP50), us(m.IdleLateP99), us(m.Margin), 100*m.Stalled, m.Spin.Round(time.Millisecond), us(m.LongestStall), us(m.FloorP99))
}

// Lateness is how late a release came, timed as the delay loop times
// releases on an idle machine, after a sleep of Sleep: a timed sleep here
// wakes later the longer it slept, so a line whose packets are far apart
// is later than one whose packets are close.
type Lateness struct {
	Sleep time.Duration
	P50   time.Duration
	P99   time.Duration
}

// MeasureLateness times n releases after each of sleeps, with the loop's
// own timer on a thread set up as the loop's (CPU, priority, timer slack). It
// takes n times the sum of sleeps, and a little more.
func MeasureLateness(sleeps []time.Duration, n int) []Lateness {
	out := make(chan []Lateness)
	go func() {
		becomeLoopThread() // the thread exits with the goroutine
		var t timer
		t.margin.Store(int64(wakeMargin()))
		var res []Lateness
		for _, sleep := range sleeps {
			late := make([]time.Duration, 0, n)
			for range n {
				due := time.Now().Add(sleep)
				t.until(due.UnixNano(), math.MaxInt64, nil) // a sleep's error is lateness here, measured below
				late = append(late, max(time.Since(due), 0))
			}
			slices.Sort(late)
			res = append(res, Lateness{Sleep: sleep, P50: late[len(late)/2], P99: late[min(len(late)*99/100, len(late)-1)]})
		}
		out <- res
	}()
	return <-out
}
