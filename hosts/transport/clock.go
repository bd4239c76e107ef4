package transport

import (
	"context"
	"runtime"
	"sort"
	"time"

	"golang.org/x/sys/unix"
)

// Dispatch calls send for each of msgs at Env.StartNS + TimeNS, in time
// order, and returns how late it was. It is the open-loop clock every
// fabric transport uses: a message never waits for an earlier one, and a
// late message is sent at once, so the offered load stays exact and a CPU
// that could not keep up shows as lateness (Sender.LateOver1ms) rather
// than as a lower load. send must hand the message off and return quickly;
// its time counts as the next message's lateness.
//
// Dispatch returns when every message is sent or ctx ends.
func Dispatch(ctx context.Context, start time.Time, host string, msgs []Message, send func(Message)) Sender {
	msgs = append([]Message(nil), msgs...)
	sort.SliceStable(msgs, func(i, j int) bool { return msgs[i].TimeNS < msgs[j].TimeNS })
	var late Lateness
	done := make(chan struct{})
	// The clock runs on a thread of its own, which exits with it.
	go func() {
		defer close(done)
		PinClockThread()
		for _, m := range msgs {
			at := start.Add(time.Duration(m.TimeNS))
			if !SleepUntil(ctx, at) {
				return
			}
			late.Add(time.Since(at))
			send(m)
		}
	}()
	<-done
	return late.Record(host)
}

// Lateness sums how far behind its schedule a sender was.
type Lateness struct {
	n, over1ms int64
	sum, max   time.Duration
}

// Add counts one send d after its time.
func (l *Lateness) Add(d time.Duration) {
	l.n++
	l.sum += d
	l.max = max(l.max, d)
	if d > time.Millisecond {
		l.over1ms++
	}
}

// Record is l as the Sender record of host.
func (l *Lateness) Record(host string) Sender {
	s := Sender{Host: host, Sends: l.n, LateOver1ms: l.over1ms, LateMaxNS: l.max.Nanoseconds()}
	if l.n > 0 {
		s.LateMeanNS = l.sum.Nanoseconds() / l.n
	}
	return s
}

// SleepUntil blocks until t (or ctx ends, returning false). It sleeps in
// nanosleep(2) rather than on a Go timer: Go timers fire from the
// netpoller, whose wait is rounded to whole milliseconds, which measurably
// bunched Poisson arrivals (inter-arrival CoV 1.13 instead of 1.0 at 500
// requests/s) and cannot pace a 1 ms probe train. nanosleep wakes on an
// hrtimer, within the thread's timer slack (PinClockThread sets 1 ns).
func SleepUntil(ctx context.Context, t time.Time) bool {
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

// PinClockThread gives the calling goroutine its own thread with 1 ns
// timer slack and, when permitted (root, CAP_SYS_NICE), the lowest
// real-time priority, so a wake-up is not queued behind other runnable
// threads. Such a thread sleeps almost all the time and works microseconds
// per wake-up, so it cannot starve anyone. Call it at the start of a
// goroutine that ends with the clock: the goroutine stays locked, so the
// thread exits with it instead of returning to Go's pool with a changed
// policy.
func PinClockThread() {
	PinTimerThread()
	rt := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: 1}
	unix.SchedSetAttr(0, &rt, 0) // best effort: without it the thread runs as before
}

// PinTimerThread gives the calling goroutine its own thread with 1 ns timer
// slack, at normal priority: for a clock that does real work at each
// wake-up (a pacer that sends the packet itself, whose kernel send path
// forwards it through the lab), where a real-time thread would take the
// CPU from the lab's delay lines.
func PinTimerThread() {
	runtime.LockOSThread()
	unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
}
