package transport

import (
	"testing"
	"time"
)

// The timeout starts at three times the first round trip (SRTT plus four
// times half of it), settles towards a steady round trip, widens when
// round trips vary, and never falls below the floor.
func TestRTTEstimatorFollowsRoundTrips(t *testing.T) {
	var r RTTEstimator
	if got := r.RTO(time.Millisecond); got != time.Millisecond {
		t.Fatalf("with no samples the timeout is %v, want the floor", got)
	}
	r.Sample(10 * time.Millisecond)
	if got := r.RTO(0); got != 30*time.Millisecond {
		t.Fatalf("after one 10 ms round trip the timeout is %v, want 30 ms", got)
	}
	for range 100 {
		r.Sample(10 * time.Millisecond)
	}
	steady := r.RTO(0)
	if steady < 10*time.Millisecond || steady > 11*time.Millisecond {
		t.Fatalf("after steady 10 ms round trips the timeout is %v", steady)
	}
	for i := range 20 {
		r.Sample(time.Duration(5+10*(i%2)) * time.Millisecond)
	}
	if got := r.RTO(0); got < 20*time.Millisecond {
		t.Fatalf("round trips alternating 5 and 15 ms left the timeout at %v", got)
	}
	if got := r.RTO(time.Second); got != time.Second {
		t.Fatalf("the floor of 1 s gave %v", got)
	}
}
