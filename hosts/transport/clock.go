package transport

import (
	"context"
	"math"
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
	// hist counts sends by lateness in µs, the last bucket holding every
	// send later than the others: a p99 that an open-loop arrival process
	// can be judged by (a Poisson sender's lateness against its packets'
	// time on the link).
	hist [lateBuckets]int64
}

// lateBuckets is the histogram's size: 1 µs buckets to 2 ms.
const lateBuckets = 2001

// Add counts one send d after its time.
func (l *Lateness) Add(d time.Duration) {
	l.n++
	l.sum += d
	l.max = max(l.max, d)
	if d > time.Millisecond {
		l.over1ms++
	}
	l.hist[min(max(d.Microseconds(), 0), lateBuckets-1)]++
}

// Quantile is the lateness that a fraction q of the sends were no later
// than, to the µs; past the histogram's 2 ms, the latest send's.
func (l *Lateness) Quantile(q float64) time.Duration {
	if l.n == 0 {
		return 0
	}
	rank := int64(math.Ceil(q * float64(l.n)))
	var seen int64
	for us, c := range l.hist[:lateBuckets-1] {
		if seen += c; seen >= rank {
			return time.Duration(us+1) * time.Microsecond
		}
	}
	return l.max
}

// Record is l as the Sender record of host.
func (l *Lateness) Record(host string) Sender {
	s := Sender{Host: host, Sends: l.n, LateOver1ms: l.over1ms, LateMaxNS: l.max.Nanoseconds(),
		LateP50NS: l.Quantile(0.5).Nanoseconds(), LateP99NS: l.Quantile(0.99).Nanoseconds()}
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
// A wait longer than one nap begins on a Go timer that ctx can cut short,
// until coarseWait before t: a transport waiting seconds for its next
// message does not wake every nap to look at ctx. A shorter wait is one
// nanosleep, as a wake-up through the Go timer costs more (a hand-off to
// this locked thread).
func SleepUntil(ctx context.Context, t time.Time) bool {
	if d := time.Until(t); d > nap {
		timer := time.NewTimer(d - coarseWait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return false
		case <-timer.C:
		}
	}
	for {
		if ctx.Err() != nil {
			return false
		}
		d := time.Until(t)
		if d <= 0 {
			return true
		}
		ts := unix.NsecToTimespec(int64(min(d, nap)))
		unix.Nanosleep(&ts, nil) // EINTR just loops
	}
}

// nap is the longest nanosleep, after which SleepUntil looks at ctx;
// coarseWait is how long before its time a long wait moves from the Go
// timer to nanosleep: more than the Go timer's rounding and its lateness
// on a busy machine, so that nanosleep still decides the instant.
const (
	nap        = 50 * time.Millisecond
	coarseWait = 5 * time.Millisecond
)

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
