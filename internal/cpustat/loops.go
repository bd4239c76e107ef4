package cpustat

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Loop is one kind of fabric's own loops, whose CPU time a trial's
// account of where its CPU went shows apart.
type Loop int

const (
	DelayLines Loop = iota // tc/delay's event loop
	Captures               // results/capture's ring readers and pcap writers
	Pacers                 // tc/pacer's rate controllers
	Sampler                // the account's own sampler
	NumLoops
)

// The kernel keeps CPU time per thread, not per goroutine, and Go moves
// goroutines between threads: a loop's time can be told apart only while
// it holds a thread of its own. Track gives it one (runtime.LockOSThread)
// and records the thread's id here, where the sampler reads each tracked
// thread's CPU clock: one system call a loop, and nothing on the loop's own
// path. The clock counts nanoseconds: a stat file's whole ticks would lose
// up to a tick per thread, the whole time of a light loop such as a
// capture's.
//
// A loop may also run in a helper process that fabric starts (the delay
// lines do: tc/delay); TrackProcess counts the whole process's time as the
// loop's, its runtime's threads included, since all of it is the loop's
// cost. Thread and process ids share one space, so one map holds both.
var tracked struct {
	mu      sync.Mutex
	threads map[int]*thread // by thread id, or process id for a helper
	ended   [NumLoops]time.Duration
	// helperEnded is the part of ended that helper processes used.
	helperEnded [NumLoops]time.Duration
}

// thread is a tracked thread or helper process: base is its time when
// tracking began (a thread from Go's pool has run other goroutines
// before), last its latest reading.
type thread struct {
	loop       Loop
	base, last time.Duration
	helper     bool // a process: read with ProcessTime
}

func (th *thread) read(id int) (time.Duration, error) {
	if th.helper {
		return ProcessTime(id)
	}
	return ThreadTime(id)
}

// Track locks the calling goroutine to its thread and counts the thread's
// CPU time from now on as loop's, until the returned function, called on
// the same goroutine, stops counting and unlocks the thread (a goroutine
// that locked it itself as well keeps it). Tracking costs the loop one
// clock read at each end.
func Track(loop Loop) (untrack func()) {
	runtime.LockOSThread()
	tid := unix.Gettid()
	base, _ := ThreadTime(tid) // a thread that cannot be read counts from zero
	tracked.mu.Lock()
	if tracked.threads == nil {
		tracked.threads = map[int]*thread{}
	}
	tracked.threads[tid] = &thread{loop: loop, base: base, last: base}
	tracked.mu.Unlock()
	return func() {
		tracked.mu.Lock()
		if th := tracked.threads[tid]; th != nil {
			if t, err := ThreadTime(tid); err == nil {
				th.last = max(th.last, t)
			}
			tracked.ended[th.loop] += th.last - th.base
			delete(tracked.threads, tid)
		}
		tracked.mu.Unlock()
		runtime.UnlockOSThread()
	}
}

// A loop that wakes thousands of times a second for a short turn cannot
// have a thread of its own: each wake-up of a goroutine locked to one
// hands the runtime's processor over between two threads, which costs
// more than many such turns. Such a loop measures its turns instead
// (Begin, End): the thread's CPU clock before and after, the thread held
// only for the turn. A clock read is a system call, so one turn in
// spanEvery is measured and counted spanEvery times. What wakes the loop
// (the runtime's timers and scheduler) stays in the process's rest.
const spanEvery = 16

var spans struct {
	turns [NumLoops]atomic.Uint64
	ns    [NumLoops]atomic.Int64 // measured turns' CPU time, times spanEvery
}

// A Span is one turn of a loop (Begin).
type Span struct {
	loop     Loop
	measured bool
	start    int64 // the thread's CPU clock at Begin, ns
}

// Begin starts one turn of loop, which End ends; the goroutine keeps its
// thread in between when the turn is measured.
func Begin(loop Loop) Span {
	if spans.turns[loop].Add(1)%spanEvery != 0 {
		return Span{}
	}
	runtime.LockOSThread()
	return Span{loop: loop, measured: true, start: threadNS()}
}

// End ends the turn.
func (s Span) End() {
	if !s.measured {
		return
	}
	d := threadNS() - s.start
	runtime.UnlockOSThread()
	if d > 0 {
		spans.ns[s.loop].Add(spanEvery * d)
	}
}

// threadNS is the calling thread's CPU time, ns (0 if unreadable).
func threadNS() int64 {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) != nil {
		return 0
	}
	return ts.Nano()
}

// LoopTimes is each loop's CPU time so far, in ticks with their
// fractions (a light loop uses less than a tick in a trial): its tracked
// threads' now plus what the threads it tracked before used, its measured
// turns', and its helper processes' (TrackProcess). It reads the CPU
// clock of every tracked thread and helper. A process running two labs at
// once has both labs' loops in it.
func LoopTimes() [NumLoops]float64 {
	var out [NumLoops]float64
	for l, d := range loopDurations() {
		out[l] = d.Seconds() * TicksPerSecond
	}
	return out
}

// loopDurations is LoopTimes as durations.
func loopDurations() [NumLoops]time.Duration {
	tracked.mu.Lock()
	defer tracked.mu.Unlock()
	out := tracked.ended
	for l := range out {
		out[l] += time.Duration(spans.ns[l].Load())
	}
	for tid, th := range tracked.threads {
		t, err := th.read(tid)
		if err != nil && th.helper { // waited for: its end adds its total
			out[th.loop] += th.last
			continue
		}
		if err != nil { // it ended without untracking: keep what it had used
			tracked.ended[th.loop] += th.last - th.base
			out[th.loop] += th.last - th.base
			delete(tracked.threads, tid)
			continue
		}
		th.last = max(th.last, t)
		out[th.loop] += th.last - th.base
	}
	return out
}

// TrackProcess counts the CPU time of process pid, a child of this one,
// as loop's, until end, called with the process's total once it has been
// waited for (its rusage), ends the count.
func TrackProcess(loop Loop, pid int) (end func(total time.Duration)) {
	th := &thread{loop: loop, helper: true}
	tracked.mu.Lock()
	if tracked.threads == nil {
		tracked.threads = map[int]*thread{}
	}
	tracked.threads[pid] = th
	tracked.mu.Unlock()
	return func(total time.Duration) {
		tracked.mu.Lock()
		defer tracked.mu.Unlock()
		if tracked.threads[pid] == th {
			tracked.ended[loop] += max(th.last, total)
			tracked.helperEnded[loop] += max(th.last, total)
			delete(tracked.threads, pid)
		}
	}
}

// Helpers are the processes TrackProcess counts now.
func Helpers() []int {
	tracked.mu.Lock()
	defer tracked.mu.Unlock()
	var out []int
	for id, th := range tracked.threads {
		if th.helper {
			out = append(out, id)
		}
	}
	return out
}

// HelperTime is the CPU time of every helper process so far, those that
// ended included: with this process's own, it is fabric's.
func HelperTime() time.Duration {
	tracked.mu.Lock()
	defer tracked.mu.Unlock()
	var sum time.Duration
	for l := range NumLoops {
		sum += tracked.helperEnded[l]
	}
	for id, th := range tracked.threads {
		if !th.helper {
			continue
		}
		if t, err := ProcessTime(id); err == nil {
			th.last = max(th.last, t)
		}
		sum += th.last
	}
	return sum
}
