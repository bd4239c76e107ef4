package delay

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/fabric-emu/fabric/internal/cpustat"
	"github.com/fabric-emu/fabric/internal/netnsutil"
)

// A Line is one direction of one link: packets arriving on In (an
// interface of the delay namespace) are serialised one after another at
// Rate and leave Delay after their last bit, or are dropped with
// probability Loss.
//
// The serialisation is here because the sending port's shaper (HTB) lets
// a packet go when its turn starts, not when its last bit would have left,
// and an idle port passes a burst at once: without it a lone 1500-byte
// packet would cross a 10 Mbit/s link 1.2 ms sooner than the link allows,
// and the packet after it 1.05 ms sooner.
type Line struct {
	Name  string // e.g. "h0:eth0>s0:eth1", for reports
	In    string
	Delay time.Duration
	Loss  float64
	Rate  float64 // bit/s; 0: no serialisation
	MTU   int     // the link's, bytes of IP: the largest packet it carries
}

// frameBytes is what a packet of ipLen bytes occupies at the shaper: the
// IP packet and its Ethernet header, as HTB counts it.
func frameBytes(ipLen int) int { return ipLen + 14 }

// FrameTime is how long a packet of ipLen bytes takes on the line's link
// (0 when the line has no rate).
func (l Line) FrameTime(ipLen int) time.Duration {
	if l.Rate <= 0 {
		return 0
	}
	return time.Duration(float64(frameBytes(ipLen)) * 8 / l.Rate * 1e9)
}

// FullFrame is how long a packet of the link's MTU takes on it: how far
// apart the packets of a burst fall due.
func (l Line) FullFrame() time.Duration { return l.FrameTime(l.MTU) }

// MaxQueued bounds the packets one line holds (the kernel's queue
// length): 65536 frames is more than 100 ms of a 1 Gbit/s link, far past
// any delay a lab needs. A packet beyond it is dropped by the kernel and
// counted as an unrequested drop.
const MaxQueued = 65536

// eventLoop runs a lab's delay lines in the process Start starts: one
// event loop, on a thread of its own, for every line. Packets stay in the kernel (NFQUEUE, 4 bytes copied); the
// loop learns each one's id, length and arrival time, and releases them in order with
// batched verdicts once their delay has passed.
type eventLoop struct {
	netns string
	lines []Line
	q     *nfq
	tsFD  int // a socket that keeps the kernel timestamping arrivals
	// stopFD is an eventfd that Stop writes: the idle loop blocks on it
	// and the queue's socket with no timeout, so a lab at rest wakes it
	// only when a packet arrives.
	stopFD int
	state  []lineState

	// early is how far ahead of its time a packet may leave with others
	// that are due: waking a thread costs this virtual machine tens of
	// microseconds (a timer write and a context switch, both traps), so
	// releases within this window share one wake-up. It is BatchTolerance
	// of the shortest delay.
	early int64
	// poll is how long the loop may leave arrivals unread while it holds
	// packets, ns: half the shortest delay, and at least 20 µs (a
	// loss-only line, whose delay is zero, then delays by at most that
	// much while other lines hold packets).
	poll int64
	// spin reads arrivals while the loop spins to a release (nil: it does
	// not): only when a line's delay is shorter than the spin, so that a
	// packet arriving meanwhile could fall due before the spin ends.
	// Otherwise nothing read then is due sooner, and each turn of the
	// spin would be a non-blocking recvmmsg spent for nothing.
	spin func() error

	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
	tid      atomic.Int32  // the loop's thread, for its CPU time
	turns    atomic.Uint64 // the loop's wake-ups, for its idle cost
	// verdictNS is the time spent in verdict system calls (VerdictTime).
	verdictNS atomic.Int64
	timer     timer
	prio      priority

	mu   sync.Mutex // guards hist and err
	hist histogram
	err  error
}

// lineState is what the loop keeps per line.
type lineState struct {
	fifo    []pending // packets held, in arrival order
	rng     *rand.Rand
	lastDue int64
	// linkFree is when the line's link is free again: the last bit of
	// the packet before has left the sender.
	linkFree int64
	packets  atomic.Uint64
	lost     atomic.Uint64 // dropped because Loss asked
}

type pending struct {
	id  uint32
	due int64 // ns, CLOCK_REALTIME
}

// startEventLoop binds a queue per line in the delay namespace at
// netnsPath, sends each line's interface to its queue, and starts the
// loop. Stop ends it.
func startEventLoop(netnsPath string, lines []Line, seed uint64) (*eventLoop, error) {
	if len(lines) > 65535 {
		return nil, fmt.Errorf("delay: %d lines, at most 65535", len(lines))
	}
	w := &eventLoop{netns: netnsPath, lines: lines, state: make([]lineState, len(lines)),
		stop: make(chan struct{}), done: make(chan struct{})}
	for i := range w.state {
		w.state[i].rng = rand.New(rand.NewPCG(seed, uint64(i)))
	}
	shortest := time.Second
	for _, l := range lines {
		shortest = min(shortest, l.Delay)
	}
	w.early = int64(BatchTolerance(shortest))
	w.poll = int64(max(shortest/2, 20*time.Microsecond))
	if int64(shortest) < spinMax {
		w.spin = w.receiveArrivals
	}
	if err := netnsutil.Do(netnsPath, w.setup); err != nil {
		w.closeFDs()
		return nil, fmt.Errorf("delay lines in %s: %w", netnsPath, err)
	}
	extraP(+1)
	go w.loop()
	return w, nil
}

// LatenessLimit is how late at the 99th percentile the releases of lines
// whose shortest delay is shortest may be before a trial over them is
// unfaithful: a tenth of that delay, since the paths' RTTs are what the
// transports react to, and at least 50 µs, about what a timed sleep of an
// idle virtual machine here overshoots (MeasureMachine).
func LatenessLimit(shortest time.Duration) time.Duration {
	return max(shortest/10, 50*time.Microsecond)
}

// BatchTolerance is how early a packet may leave with others that are due
// on lines whose shortest delay is shortest: a tenth of LatenessLimit, so
// that sharing a wake-up moves a release by a tenth of what a trial
// tolerates.
func BatchTolerance(shortest time.Duration) time.Duration { return LatenessLimit(shortest) / 10 }

// extraPs counts the running loops, each holding a P of its own.
var (
	extraMu  sync.Mutex
	extraPs  int
	baseProc int
)

// extraP raises (or, with -1, lowers) GOMAXPROCS by one for a loop that
// holds its P for good.
func extraP(delta int) {
	extraMu.Lock()
	defer extraMu.Unlock()
	if extraPs == 0 {
		baseProc = runtime.GOMAXPROCS(0)
	}
	extraPs += delta
	runtime.GOMAXPROCS(baseProc + extraPs)
}

// setup runs inside the delay namespace.
func (w *eventLoop) setup() error {
	var err error
	if w.q, err = openNFQ(); err != nil {
		return err
	}
	for i := range w.lines {
		if err := w.q.bind(uint16(i), MaxQueued); err != nil {
			return err
		}
	}
	// The kernel stamps arriving packets only while some socket asks for
	// timestamps; this one does, for as long as the lines run.
	if w.tsFD, err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0); err != nil {
		return err
	}
	if err := unix.SetsockoptInt(w.tsFD, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1); err != nil {
		return err
	}
	if w.stopFD, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		return err
	}
	return queueRules(w.lines)
}

func (w *eventLoop) closeFDs() {
	if w.q != nil {
		w.q.close()
	}
	if w.tsFD > 0 {
		unix.Close(w.tsFD)
	}
	if w.stopFD > 0 {
		unix.Close(w.stopFD)
	}
}

// Stop ends the loop; packets still held are dropped with the queues.
func (w *eventLoop) Stop() error {
	select {
	case <-w.stop:
	default:
		close(w.stop)
		unix.Write(w.stopFD, []byte{1, 0, 0, 0, 0, 0, 0, 0}) // wakes an idle loop
	}
	<-w.done
	w.closeFDs()
	w.stopOnce.Do(func() { extraP(-1) })
	return w.Err()
}

// Err is why the loop stopped early, or nil.
func (w *eventLoop) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

func (w *eventLoop) fail(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil {
		w.err = err
	}
}

// loop runs on a locked thread with 1 ns timer slack, and makes its system
// calls raw while it holds packets: it never gives its P (the Go
// scheduler's right to run Go code) back to the runtime then. Through
// ordinary system calls, a sleep longer than 20 µs lets the runtime hand
// the P to another goroutine, and the loop, woken on time, then waits for
// a P of its own. startEventLoop raises GOMAXPROCS by one for as long as
// the loop runs, so the rest of the process keeps its share. It runs at
// real-time priority unless it is saturated (priority.go). The
// kernel timestamps each packet as it arrives, so the loop need not read
// arrivals at once: while it holds packets it sleeps until shortly before
// the next release, then reads every arrival in batches and releases
// every packet that is due, with one batched verdict per line. With
// nothing held it waits for the socket.
//
// "Shortly before": a timed sleep on a virtual machine wakes tens of µs
// late, so the loop asks to wake that much early (it
// measures it as it starts, then follows its own sleeps: nextMargin) and
// spins the last few microseconds (reading arrivals as it goes only if a
// line is shorter than the spin: spin). Stats reports the lateness
// that remains, and trials flag it.
func (w *eventLoop) loop() {
	defer close(w.done)
	tid, realtime := becomeLoopThread()
	w.tid.Store(int32(tid))
	defer cpustat.Track(cpustat.DelayLines)()
	w.prio.start(realtime, time.Now().UnixNano())
	w.timer.margin.Store(int64(wakeMargin()))
	fds := []unix.PollFd{{Fd: int32(w.q.fd), Events: unix.POLLIN}, {Fd: int32(w.stopFD), Events: unix.POLLIN}}
	for {
		select {
		case <-w.stop:
			return
		default:
		}
		w.turns.Add(1)
		if err := w.wait(fds); err != nil {
			w.fail(err)
			return
		}
		if err := w.q.receive(w.arrive); err != nil {
			w.fail(fmt.Errorf("delay: receive: %w", err))
			return
		}
		now := time.Now().UnixNano()
		if err := w.release(now); err != nil {
			w.fail(err)
			return
		}
		w.prio.check(now)
	}
}

// wait blocks until something is due: on the socket and Stop's eventfd,
// with no timeout, when nothing is held, else on the loop's timer, reading
// arrivals while it spins only when one could fall due before the spin
// ends (spin).
func (w *eventLoop) wait(fds []unix.PollFd) error {
	next := w.nextDue()
	if next == noneDue {
		// An ordinary system call, unlike the timed waits: the loop has
		// nothing to release, so it gives its P back while it waits, and
		// the runtime can stop the world for a GC meanwhile (a raw wait
		// without a timeout would block that for good, one with a timeout
		// wakes the loop over and over).
		if _, err := unix.Ppoll(fds, nil, nil); err != nil && err != unix.EINTR {
			return fmt.Errorf("delay: wait: %w", err)
		}
		return nil
	}
	return w.timer.until(next-w.early, time.Now().UnixNano()+w.poll, w.spin)
}

// receiveArrivals takes every packet queued so far (see spin).
func (w *eventLoop) receiveArrivals() error {
	if err := w.q.receive(w.arrive); err != nil {
		return fmt.Errorf("delay: receive: %w", err)
	}
	return nil
}

// timer is how the loop waits for a release: asleep until its wake-up
// margin before it, then spinning at most spinMax to it. A release further
// away than that after the sleep waits for the next wake-up instead, so
// the spinning (its CPU) stays bounded whatever the packet rate.
// MeasureMachine times releases with a timer of its own, so what it
// reports is this code's lateness, not a model's.
type timer struct {
	margin atomic.Int64 // how early it wakes before a release, ns (nextMargin)
}

// until waits for due (ns, CLOCK_REALTIME), sleeping no later than limit;
// spin, when not nil, runs on every turn of the spin.
func (t *timer) until(due, limit int64, spin func() error) error {
	now := time.Now().UnixNano()
	if due-now > spinMax {
		wake := due - t.margin.Load()
		if wake <= now {
			// Already within the timer's overshoot of the release: a sleep
			// to due-margin would return at once, over and over, and the
			// loop would spin the whole margin away (measured: a whole
			// core, 210 µs of CPU per packet, when a busy start-up had
			// measured a large margin). Sleep to spinMax before it
			// instead and accept the overshoot as lateness.
			wake = due - spinMax
		}
		target := min(wake, limit)
		ts := unix.NsecToTimespec(target)
		_, _, errno := unix.RawSyscall6(unix.SYS_CLOCK_NANOSLEEP, unix.CLOCK_REALTIME, unix.TIMER_ABSTIME,
			uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
		if errno != 0 && errno != unix.EINTR {
			return fmt.Errorf("delay: wait: %w", errno)
		}
		now = time.Now().UnixNano()
		if errno == 0 {
			t.margin.Store(nextMargin(t.margin.Load(), now-target))
		}
	}
	if due-now > spinMax {
		return nil
	}
	for now < due {
		if spin != nil {
			if err := spin(); err != nil {
				return err
			}
		}
		now = time.Now().UnixNano()
	}
	return nil
}

// loopNice is the loop thread's nice value out of real time (priority.go).
const loopNice = -10

// spinMax bounds the spinning before a release: with it the loop costs at
// most this much CPU per release however late its timer wakes it.
const spinMax = int64(20 * time.Microsecond)

// becomeLoopThread locks the calling goroutine to its thread for good (the
// thread exits with the goroutine) and sets that thread up as the loop's:
// fine timer slack, real-time priority where the kernel grants it (see
// priority.go) and nice −10 in case it does not, on LoopCPU. It returns the
// thread's id and whether it runs at real time.
//
// Nice −10 where real time is refused (a container without CAP_SYS_NICE):
// on two cores, sixteen busy Homa transports left a nice-0 loop runnable
// but waiting, until it fell seconds behind and its queues overflowed
// (homa/priorities on W2). Nice −10 weighs about nine times a normal
// thread.
func becomeLoopThread() (tid int, realtime bool) {
	runtime.LockOSThread() // never unlocked
	tid = unix.Gettid()
	unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
	unix.Setpriority(unix.PRIO_PROCESS, tid, loopNice) // best effort
	realtime = setRealtime(true) == nil
	if LoopCPU >= 0 { // see RPSMask
		var set unix.CPUSet
		set.Set(LoopCPU)
		unix.SchedSetaffinity(0, &set)
	}
	return tid, realtime
}

// wakeMargin measures how late this machine's timed sleeps wake (the median
// of 40 sleeps of 50 µs), within [0, maxMargin]: the loop sleeps that much
// less, so that it wakes on time as often as late.
func wakeMargin() time.Duration {
	var over []time.Duration
	for range 40 {
		at := time.Now().Add(50 * time.Microsecond)
		ts := unix.NsecToTimespec(at.UnixNano())
		unix.ClockNanosleep(unix.CLOCK_REALTIME, unix.TIMER_ABSTIME, &ts, nil)
		over = append(over, time.Since(at))
	}
	slices.Sort(over)
	return min(max(over[len(over)/2], 0), maxMargin)
}

// nextMargin moves margin one step towards the median overshoot of the
// loop's own sleeps, given one sleep's overshoot (a streaming median: up a
// step when a sleep woke later than the margin, down one when earlier).
// The margin measured at start times sleeps of 50 µs, but a sleep wakes
// later the longer it slept, so the margin follows the loop's own sleeps
// (BenchmarkDelayAccuracy shows the effect on an idle ping's RTT).
func nextMargin(margin, over int64) int64 {
	switch {
	case over > margin:
		return min(margin+marginStep, int64(maxMargin))
	case over < margin:
		return max(margin-marginStep, 0)
	}
	return margin
}

// marginStep is nextMargin's step: at a few thousand sleeps a second it
// crosses the tens of µs between short and long sleeps' overshoots within
// a few tens of ms, and its own jitter (a step a sleep) stays far below
// the overshoots' spread.
const marginStep = int64(time.Microsecond)

// maxMargin bounds the wake-up margin: a loop started while the machine
// is busy (a lab coming up) measures overshoots of hundreds of µs, and
// waking that early before every release spins a core away; sleeps on an
// idle VM here overshoot 40–100 µs.
const maxMargin = 100 * time.Microsecond

// Margin is how early the loop wakes before a release (measured at start,
// then tracked, see nextMargin).
func (w *eventLoop) Margin() time.Duration { return time.Duration(w.timer.margin.Load()) }

// LoopCPU is the CPU the loop runs on (-1: any, on a one-CPU machine).
// Releasing a packet makes the kernel carry it on from the releasing
// system call, through the next hops and the receiver's stack, unless the
// receiving interface steers it to another CPU: RPSMask is the mask that
// does, so that the loop's time goes to releasing, not to what follows.
//
// Pinned with steering, loaded lines were later less often than pinned
// without steering or neither; idle, steering costs a little, since each
// released packet wakes the other CPU (BenchmarkDelayAccuracy), but loaded
// lines are what trials are judged on.
var LoopCPU = func() int {
	if runtime.NumCPU() < 2 {
		return -1
	}
	return 0
}()

// OffLoopCPU moves the calling thread, which must be locked to it, off
// LoopCPU while this process has delay lines running (and another CPU is
// allowed), and returns what puts it back. For work that holds a CPU in
// the kernel for milliseconds without a point where it can be preempted
// (a capture ring's allocation, a real-time sender's transmit path):
// on the loop's CPU it makes the lines as late.
func OffLoopCPU() (restore func()) {
	var all unix.CPUSet
	if LoopCPU < 0 || !Running() || unix.SchedGetaffinity(0, &all) != nil {
		return func() {}
	}
	others := all
	others.Clear(LoopCPU)
	if others.Count() == 0 || unix.SchedSetaffinity(0, &others) != nil {
		return func() {}
	}
	return func() { unix.SchedSetaffinity(0, &all) }
}

// RPSMask is the rps_cpus mask (hex) for interfaces that receive released
// packets: every CPU but LoopCPU ("" on a one-CPU machine).
func RPSMask() string {
	if LoopCPU < 0 {
		return ""
	}
	var mask uint64
	for c := range min(runtime.NumCPU(), 64) {
		if c != LoopCPU {
			mask |= 1 << c
		}
	}
	return strconv.FormatUint(mask, 16)
}

// noneDue is nextDue's answer when nothing is held.
const noneDue = int64(1<<63 - 1)

// arrive takes one queued packet: dropped at once if the line's loss says
// so, else held until its arrival time plus the line's delay. A constant
// delay keeps arrival order; lastDue keeps it even if timestamps stutter.
func (w *eventLoop) arrive(p packet) {
	if int(p.queue) >= len(w.state) {
		return
	}
	ls, l := &w.state[p.queue], w.lines[p.queue]
	ls.packets.Add(1)
	if l.Loss > 0 && ls.rng.Float64() < l.Loss {
		ls.lost.Add(1)
		w.q.verdict(p.queue, p.id, nfDrop, false)
		return
	}
	at := p.tsNS
	if at == 0 {
		at = time.Now().UnixNano()
	}
	sent := at // when its last bit has left
	if l.Rate > 0 && p.len > 0 {
		// The link carries one packet at a time: a packet the shaper let
		// go early (HTB's burst) waits for the one before it.
		sent = max(at, ls.linkFree) + int64(l.FrameTime(p.len))
		ls.linkFree = sent
	}
	due := max(sent+int64(l.Delay), ls.lastDue)
	ls.lastDue = due
	ls.fifo = append(ls.fifo, pending{id: p.id, due: due})
}

// releaseChunk bounds the packets one verdict datagram lets go. A loop the
// CPU held back releases everything that fell due meanwhile, and the
// packets of one datagram's verdicts reach the next hop's per-CPU input
// backlog (net.core.netdev_max_backlog, 1000 by default) faster than it
// drains, and the backlog drops packets nobody asked to lose; a few
// hundred at a time leave it room.
const releaseChunk = 256

// release lets every packet whose time has come go, one batched verdict
// per line and at most releaseChunk packets per datagram, and counts how
// late each one was. The lock covers only the count: Stats need not wait
// while a verdict's system call forwards packets through the lab.
func (w *eventLoop) release(now int64) error {
	room := releaseChunk
	for i := range w.state {
		ls := &w.state[i]
		w.mu.Lock()
		due := 0
		for due < len(ls.fifo) && ls.fifo[due].due <= now+w.early {
			w.hist.add(time.Duration(now - ls.fifo[due].due))
			due++
		}
		w.mu.Unlock()
		for due > 0 {
			n := min(due, room)
			w.q.verdict(uint16(i), ls.fifo[n-1].id, nfAccept, true)
			ls.fifo, due, room = ls.fifo[n:], due-n, room-n
			if room == 0 {
				if err := w.flush(); err != nil {
					return err
				}
				room = releaseChunk
			}
		}
		if len(ls.fifo) == 0 {
			ls.fifo = ls.fifo[:0:0] // let the backing array go
		}
	}
	return w.flush()
}

// flush sends the verdicts gathered so far and times the system call: in it
// the kernel carries every accepted packet on through the lab (the delay
// namespace's forwarding, the next hop's queue), work that is the emulated
// network's, not the loop's (VerdictTime).
func (w *eventLoop) flush() error {
	t0 := time.Now()
	err := w.q.flush()
	w.verdictNS.Add(int64(time.Since(t0)))
	return err
}

// VerdictTime is how long the loop has spent in its verdicts' system
// calls: on its thread, which never yields there, that is CPU time, and
// most of it is the kernel forwarding the released packets. LoopCPU less
// it is the loop's own cost.
func (w *eventLoop) VerdictTime() time.Duration { return time.Duration(w.verdictNS.Load()) }

// LoopCPU is the CPU time the loop's thread has used (user and system):
// what the delay lines cost this machine. It reads the thread's CPU clock,
// to the nanosecond, or else its stat file, in ticks.
func (w *eventLoop) LoopCPU() (time.Duration, error) {
	if d, err := cpustat.ThreadTime(int(w.tid.Load())); err == nil {
		return d, nil
	}
	t, err := cpustat.ReadThread(int(w.tid.Load()))
	if err != nil {
		return 0, err
	}
	return time.Duration(t.Own) * time.Second / cpustat.TicksPerSecond, nil
}

// Turns counts the loop's turns (each a wake-up) since it started.
func (w *eventLoop) Turns() uint64 { return w.turns.Load() }

// nextDue is the earliest release time held, or noneDue.
func (w *eventLoop) nextDue() int64 {
	next := noneDue
	for i := range w.state {
		if f := w.state[i].fifo; len(f) > 0 {
			next = min(next, f[0].due)
		}
	}
	return next
}
