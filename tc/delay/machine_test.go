package delay

import (
	"testing"
	"time"
)

// The floor is the lateness quantile of releases due at random instants:
// checked against stalls whose answer is worked out by hand.
func TestStallFloor(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		name    string
		stalls  []time.Duration
		stalled float64
		floor   time.Duration
	}{
		// One 100 ms stall in 1 s: releases late by > L are (100 ms − L) / 1 s,
		// 1 % at L = 90 ms.
		{"one long stall", []time.Duration{100 * ms}, 0.1, 90 * ms},
		// Twenty 1 ms stalls: 20 (1 ms − L) / 1 s = 1 % at L = 0.5 ms.
		{"many short stalls", repeat(ms, 20), 0.02, ms / 2},
		// Stalls covering under 1 % of the time never make the p99 late.
		{"rare stalls", repeat(ms, 9), 0.009, 0},
		{"none", nil, 0, 0},
	} {
		stalled, longest, floor := stallFloor(c.stalls, time.Second, 0.99)
		if d := stalled - c.stalled; d > 1e-9 || d < -1e-9 {
			t.Errorf("%s: stalled %v, want %v", c.name, stalled, c.stalled)
		}
		if d := floor - c.floor; d > time.Microsecond || d < -time.Microsecond {
			t.Errorf("%s: floor %v, want %v", c.name, floor, c.floor)
		}
		if len(c.stalls) > 0 && longest != c.stalls[0] {
			t.Errorf("%s: longest %v, want %v", c.name, longest, c.stalls[0])
		}
	}
}

func repeat(d time.Duration, n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = d
	}
	return out
}

// MeasureMachine spins as long as asked, and its numbers are consistent:
// the stall floor lies within the longest stall, the stalls within the
// spin, and the floor is no lower than either of its parts (their
// arithmetic is TestStallFloor's, on hand-worked cases).
func TestMeasureMachine(t *testing.T) {
	m := MeasureMachine(100 * time.Millisecond)
	t.Log(m)
	if m.Spin < 100*time.Millisecond || m.Spin > 2*time.Second {
		t.Errorf("spun %v, asked 100ms", m.Spin)
	}
	if m.IdleLateP50 < 0 || m.IdleLateP99 < m.IdleLateP50 || m.Margin < 0 || m.Margin > maxMargin {
		t.Errorf("idle lateness p50 %v, p99 %v, margin %v", m.IdleLateP50, m.IdleLateP99, m.Margin)
	}
	if m.Stalled < 0 || m.Stalled > 1 || m.StallFloorP99 > m.LongestStall || m.LongestStall > m.Spin ||
		m.FloorP99 < m.IdleLateP99 || m.FloorP99 < m.StallFloorP99 {
		t.Errorf("inconsistent: %+v", m)
	}
}

// The margin follows the median of the sleeps' overshoots, a step a sleep,
// within [0, maxMargin].
func TestNextMargin(t *testing.T) {
	us := int64(time.Microsecond)
	m := int64(0)
	// Overshoots alternating 40 and 60 µs around a median of 50 µs.
	for i := range 400 {
		m = nextMargin(m, (40+20*int64(i%2))*us)
	}
	if m < 39*us || m > 61*us {
		t.Errorf("margin %v µs after overshoots of 40 and 60 µs", m/us)
	}
	for range 1000 {
		m = nextMargin(m, int64(time.Second))
	}
	if m != int64(maxMargin) {
		t.Errorf("margin %v after long overshoots, want the cap %v", time.Duration(m), maxMargin)
	}
	for range 1000 {
		m = nextMargin(m, 0)
	}
	if m != 0 {
		t.Errorf("margin %v after sleeps on time, want 0", time.Duration(m))
	}
}
