package endpoint

import (
	"context"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// sleepUntil blocks until t (or ctx ends, returning false). It sleeps in
// nanosleep(2) rather than on a Go timer: Go timers fire from the
// netpoller, whose wait is rounded to whole milliseconds, which measurably
// bunched Poisson arrivals (inter-arrival CoV 1.13 instead of 1.0 at 500
// requests/s) and cannot pace a 1 ms probe train. nanosleep wakes on an
// hrtimer, within the thread's 50 µs timer slack. The syscall is the
// generator's clock, not per-flow work.
func sleepUntil(ctx context.Context, t time.Time) bool {
	for {
		if ctx.Err() != nil {
			return false
		}
		d := time.Until(t)
		if d <= 0 {
			return true
		}
		// Wake at least every 50 ms to notice cancellation.
		ts := unix.NsecToTimespec(int64(min(d, 50*time.Millisecond)))
		unix.Nanosleep(&ts, nil) // EINTR just loops
	}
}

// pinGenerator gives the calling goroutine its own thread with 1 ns timer
// slack and, when permitted (root, CAP_SYS_NICE), the lowest real-time
// priority, so a wake-up is not queued behind other runnable threads. The
// thread sleeps almost all the time and works microseconds per wake-up, so
// it cannot starve anyone. Call it at the start of a goroutine that ends
// with the generator: the goroutine stays locked, so the thread exits with
// it instead of returning to Go's pool with a changed policy.
func pinGenerator() {
	runtime.LockOSThread()
	unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
	rt := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: 1}
	unix.SchedSetAttr(0, &rt, 0) // best effort: without it the thread runs as before
}
