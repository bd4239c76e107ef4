package delay

import (
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The loop thread runs at real-time priority (SCHED_FIFO, the lowest
// level) while it uses at most demoteAbove of its CPU, and at nice −10 in
// the normal class otherwise. Under the normal class (EEVDF), a woken
// nice −10 thread does not preempt the thread that is running: measured
// here, a release timer that fired behind a nice-0 thread of the sender
// waited 2.7 ms for the CPU, and such waits made most trials of
// hull/dynamic --quick late past their limit. At real time the wake-up
// preempts at once. But a real-time thread that never sleeps starves what
// else runs on its CPU (BenchmarkDelayLineCapacity at 100 kpps: the
// receiver on the loop's CPU got 30 of every 100 kpps), so a loop that is
// saturated steps down to the normal class, where it shares, and steps up
// again once it is not.
const (
	demoteAbove  = 0.75
	promoteBelow = 0.5
	// priorityWindow is how often the loop weighs its CPU use: long
	// enough to span many releases, short enough that a saturated loop
	// starves its CPU's other threads for at most this long.
	priorityWindow = int64(100 * time.Millisecond)
)

// priority is the loop thread's scheduling class, and how long it spent
// out of real time.
type priority struct {
	granted  bool  // the kernel let the thread run at real time
	realtime bool  // it runs at real time now
	windowAt int64 // the window's start, ns CLOCK_REALTIME
	cpuAt    int64 // the thread's CPU time then, ns

	// demotedSince is when the thread last left real time (0: it runs
	// there, or never could); demotedNS sums earlier such spells.
	demotedSince atomic.Int64
	demotedNS    atomic.Int64
	demotions    atomic.Uint64
}

// setRealtime moves the calling thread into real time or out of it.
func setRealtime(on bool) error {
	a := unix.SchedAttr{Policy: unix.SCHED_NORMAL, Nice: loopNice}
	if on {
		a = unix.SchedAttr{Policy: unix.SCHED_FIFO, Priority: 1}
	}
	return unix.SchedSetAttr(0, &a, 0)
}

// start begins weighing the calling thread, which becomeLoopThread set up
// and whose real-time request the kernel granted or refused.
func (p *priority) start(granted bool, now int64) {
	p.granted, p.realtime = granted, granted
	p.windowAt, p.cpuAt = now, threadCPU()
}

// check weighs the last window's CPU use once the window has passed and
// moves the thread between the classes (see demoteAbove).
func (p *priority) check(now int64) {
	if !p.granted || now-p.windowAt < priorityWindow {
		return
	}
	cpu := threadCPU()
	busy := float64(cpu-p.cpuAt) / float64(now-p.windowAt)
	p.windowAt, p.cpuAt = now, cpu
	switch {
	case p.realtime && busy > demoteAbove:
		if setRealtime(false) == nil {
			p.realtime = false
			p.demotedSince.Store(now)
			p.demotions.Add(1)
		}
	case !p.realtime && busy < promoteBelow:
		if setRealtime(true) == nil {
			p.realtime = true
			p.demotedNS.Add(now - p.demotedSince.Swap(0))
		}
	}
}

// demoted is how long the thread has run out of real time since start,
// as of now (0 if it never could run there: see granted).
func (p *priority) demoted(now int64) time.Duration {
	d := p.demotedNS.Load()
	if since := p.demotedSince.Load(); since > 0 {
		d += now - since
	}
	return time.Duration(d)
}

// threadCPU is the calling thread's CPU time, ns: a raw system call, like
// the loop's others.
func threadCPU() int64 {
	var ts unix.Timespec
	unix.RawSyscall(unix.SYS_CLOCK_GETTIME, unix.CLOCK_THREAD_CPUTIME_ID, uintptr(unsafe.Pointer(&ts)), 0)
	return ts.Nano()
}
