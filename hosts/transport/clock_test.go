package transport

import (
	"testing"
	"time"
)

// Lateness's percentiles, by hand: of 100 sends late by 1.3..100.3 µs,
// the 50th is 50.3 µs late and the 99th 99.3 µs, which the 1 µs buckets
// give as 51 µs and 100 µs (the bucket's upper edge); one send 5 ms late,
// past the histogram's 2 ms, makes the maximum the p100.
func TestLatenessQuantiles(t *testing.T) {
	var l Lateness
	for us := 1; us <= 100; us++ {
		l.Add(time.Duration(us)*time.Microsecond + 300*time.Nanosecond)
	}
	r := l.Record("h1")
	if r.LateP50NS != 51_000 || r.LateP99NS != 100_000 {
		t.Errorf("p50 %v p99 %v, want 51 µs and 100 µs", time.Duration(r.LateP50NS), time.Duration(r.LateP99NS))
	}
	l.Add(5 * time.Millisecond)
	if got := l.Quantile(1); got != 5*time.Millisecond {
		t.Errorf("p100 %v, want the 5 ms maximum", got)
	}
	if r := (&Lateness{}).Record("h2"); r.LateP99NS != 0 || r.Sends != 0 {
		t.Errorf("no sends: %+v", r)
	}
}
