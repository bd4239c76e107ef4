package transport

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The jobs run at their periods while there is work, not at all while
// there is none, and again one period after the wake that brings work.
func TestRunWhileBusy(t *testing.T) {
	var mu sync.Mutex
	busy := true
	var fast, slow atomic.Int64
	wake := NewWake()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		RunWhileBusy(ctx, wake, func() bool { mu.Lock(); defer mu.Unlock(); return busy },
			Job{Every: 5 * time.Millisecond, Run: func(time.Time) { fast.Add(1) }},
			Job{Every: 40 * time.Millisecond, Run: func(time.Time) { slow.Add(1) }})
	}()
	setBusy := func(b bool) {
		mu.Lock()
		busy = b
		mu.Unlock()
		wake.Signal()
	}
	time.Sleep(200 * time.Millisecond)
	// At most one run per period (a late timer skips periods), and on a
	// slow machine at least a few.
	if n := fast.Load(); n > 40 || n < 4 {
		t.Errorf("the 5 ms job ran %d times in 200 ms", n)
	}
	if n := slow.Load(); n > 5 || n < 1 {
		t.Errorf("the 40 ms job ran %d times in 200 ms", n)
	}
	setBusy(false)
	time.Sleep(20 * time.Millisecond) // a run under way ends
	f0, s0 := fast.Load(), slow.Load()
	time.Sleep(300 * time.Millisecond)
	if f, s := fast.Load()-f0, slow.Load()-s0; f != 0 || s != 0 {
		t.Errorf("with no work the jobs ran %d and %d times", f, s)
	}
	setBusy(true)
	time.Sleep(100 * time.Millisecond)
	if fast.Load() == f0 {
		t.Error("the jobs did not run again after work began")
	}
	cancel()
	<-done
}
