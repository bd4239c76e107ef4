package pacer

import (
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/fabric-emu/fabric/internal/cpustat"
)

// The rate controllers of every pacer in this process run on one thread,
// the loop: the pacers that share a T_r are updated in the same wake-up,
// so a lab's pacers cost one wake-up per T_r, not one each. The loop reads
// each bucket's bytes in and out from memory that eBPF programs at the
// qdisc tracepoints keep (bpf/loop.bpf.c), with no system call; a rate
// change is one netlink request (classSocket).
//
// A pacer rests when its bucket is empty, took nothing in the last
// interval and its rate is at the floor: an update then changes nothing,
// so the loop stops updating it until the eBPF program sees a packet
// enter the bucket and wakes the loop through a ring buffer. With every
// pacer at rest the loop blocks in the kernel with no timeout.
type loop struct {
	objs    loopObjects
	links   []link.Link
	buckets []byte // the buckets map, mapped into this process
	// The wake ring's consumer and producer positions, mapped: the loop
	// only needs to be woken, so it skips every record.
	ringCons, ringProd []byte
	evfd               int // written when the pacers change or the loop must stop
	done               chan struct{}

	mu     sync.Mutex // guards the fields below; held while a turn works
	pacers []*Pacer
	free   []uint32 // unused bucket slots
	next   uint32   // the first slot never used
	stop   bool
}

// The process's loop, started with its first pacer and ended with its
// last.
var (
	loopMu  sync.Mutex
	theLoop *loop
)

// base is the loop's clock's origin: update times are multiples of a
// pacer's T_r from it, so pacers with one T_r fall due together.
var base = time.Now()

func monotonic() int64 { return int64(time.Since(base)) }

// nextTick is the first multiple of tr after now.
func nextTick(now int64, tr time.Duration) int64 { return (now/int64(tr) + 1) * int64(tr) }

// register puts p under the process's loop, starting the loop if it is
// the first pacer.
func register(p *Pacer) error {
	loopMu.Lock()
	defer loopMu.Unlock()
	if theLoop != nil && theLoop.stopped() { // its wait failed
		theLoop.close()
		theLoop = nil
	}
	if theLoop == nil {
		l, err := startLoop()
		if err != nil {
			return fmt.Errorf("rate controller loop: %w", err)
		}
		theLoop = l
	}
	if err := theLoop.add(p); err != nil {
		if theLoop.empty() {
			theLoop.close()
			theLoop = nil
		}
		return err
	}
	return nil
}

// unregister takes p from the loop; when it returns the loop no longer
// touches p. The last pacer's unregister ends the loop.
func unregister(p *Pacer) {
	loopMu.Lock()
	defer loopMu.Unlock()
	if theLoop == nil {
		return
	}
	theLoop.remove(p)
	if theLoop.empty() {
		theLoop.close()
		theLoop = nil
	}
}

func startLoop() (*loop, error) {
	l := &loop{evfd: -1, done: make(chan struct{})}
	if err := l.load(); err != nil {
		l.release()
		return nil, err
	}
	go l.run()
	return l, nil
}

func (l *loop) load() error {
	spec, err := loadLoop()
	if err != nil {
		return err
	}
	if err := spec.Variables["bucket_minor"].Set(uint32(bucketMinor)); err != nil {
		return err
	}
	if err := spec.LoadAndAssign(&l.objs, nil); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return fmt.Errorf("loading: %+v", ve)
		}
		return fmt.Errorf("loading: %w", err)
	}
	for _, prog := range []*ebpf.Program{l.objs.BucketEnqueue, l.objs.BucketDequeue} {
		lk, err := link.AttachTracing(link.TracingOptions{Program: prog, AttachType: ebpf.AttachTraceRawTp})
		if err != nil {
			return fmt.Errorf("attaching %s: %w", prog, err)
		}
		l.links = append(l.links, lk)
	}
	page := os.Getpagesize()
	size := int(l.objs.Buckets.MaxEntries()) * int(unsafe.Sizeof(loopBucket{}))
	if l.buckets, err = unix.Mmap(l.objs.Buckets.FD(), 0, (size+page-1)/page*page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err != nil {
		return fmt.Errorf("mapping the buckets: %w", err)
	}
	if l.ringCons, err = unix.Mmap(l.objs.Wake.FD(), 0, page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err != nil {
		return fmt.Errorf("mapping the wake ring: %w", err)
	}
	if l.ringProd, err = unix.Mmap(l.objs.Wake.FD(), int64(page), page, unix.PROT_READ, unix.MAP_SHARED); err != nil {
		return fmt.Errorf("mapping the wake ring: %w", err)
	}
	l.evfd, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	return err
}

// release frees what load took.
func (l *loop) release() {
	for _, lk := range l.links {
		lk.Close()
	}
	for _, m := range [][]byte{l.buckets, l.ringCons, l.ringProd} {
		if m != nil {
			unix.Munmap(m)
		}
	}
	if l.evfd >= 0 {
		unix.Close(l.evfd)
	}
	l.objs.Close()
}

// close ends the loop's thread and frees its programs.
func (l *loop) close() {
	l.mu.Lock()
	l.stop = true
	l.mu.Unlock()
	l.poke()
	<-l.done
	l.release()
}

func (l *loop) stopped() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stop
}

func (l *loop) empty() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.pacers) == 0
}

// poke wakes the loop to look at its pacers again.
func (l *loop) poke() { unix.Write(l.evfd, []byte{1, 0, 0, 0, 0, 0, 0, 0}) }

// bucket is slot i of the mapped buckets.
func (l *loop) bucket(i uint32) *loopBucket {
	return (*loopBucket)(unsafe.Pointer(&l.buckets[uintptr(i)*unsafe.Sizeof(loopBucket{})]))
}

// add gives p a bucket slot, tells the eBPF programs its bucket and
// schedules its first update.
func (l *loop) add(p *Pacer) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stop {
		return errors.New("rate controller loop stopped")
	}
	var slot uint32
	switch {
	case len(l.free) > 0:
		slot, l.free = l.free[0], l.free[1:]
	case l.next < l.objs.Buckets.MaxEntries():
		slot = l.next
		l.next++
	default:
		return fmt.Errorf("more than %d pacers in one process", l.objs.Buckets.MaxEntries())
	}
	b := l.bucket(slot)
	atomic.StoreUint64(&b.In, 0)
	atomic.StoreUint64(&b.Out, 0)
	atomic.StoreUint32(&b.Resting, 0)
	key := loopBucketKey{Netns: p.netns, Ifindex: uint32(p.ifidx), Classid: p.bucket}
	if err := l.objs.BucketIndex.Update(&key, &slot, ebpf.UpdateNoExist); err != nil {
		l.free = append(l.free, slot)
		return fmt.Errorf("registering the bucket: %w", err)
	}
	p.slot, p.offIn, p.offOut = slot, 0, 0
	if _, err := p.resync(b); err != nil { // a class kept from before starts with its counters
		l.objs.BucketIndex.Delete(&key)
		l.free = append(l.free, slot)
		return err
	}
	now := monotonic()
	p.prevIn, _ = p.counters(b)
	p.prevAt, p.due, p.resting, p.lastSet = now, nextTick(now, p.cfg.RateInterval), false, p.ctl.rate
	l.pacers = append(l.pacers, p)
	l.poke()
	return nil
}

// remove takes p off the loop, if it is on it.
func (l *loop) remove(p *Pacer) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, q := range l.pacers {
		if q == p {
			l.drop(i)
			return
		}
	}
}

// drop takes the i'th pacer off the loop and frees its slot.
func (l *loop) drop(i int) {
	p := l.pacers[i]
	key := loopBucketKey{Netns: p.netns, Ifindex: uint32(p.ifidx), Classid: p.bucket}
	l.objs.BucketIndex.Delete(&key)
	l.free = append(l.free, p.slot)
	l.pacers = append(l.pacers[:i], l.pacers[i+1:]...)
}

// run is the loop's thread. It is locked to its goroutine for good, so
// that the thread's CPU time is the controllers' (LoopCPU), and exits with
// it.
func (l *loop) run() {
	defer close(l.done)
	runtime.LockOSThread()
	defer cpustat.Track(cpustat.Pacers)()          // the trial's CPU account reads this thread
	unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0) // wake on time: T_r is sub-millisecond
	loopThread.start()
	defer loopThread.end()
	fds := []unix.PollFd{{Fd: int32(l.objs.Wake.FD()), Events: unix.POLLIN}, {Fd: int32(l.evfd), Events: unix.POLLIN}}
	var drain [8]byte
	for {
		next, stop := l.turn()
		if stop {
			return
		}
		var timeout *unix.Timespec
		if next != noneDue {
			ts := unix.NsecToTimespec(max(next-monotonic(), 0)) // a fresh one: ppoll writes back what is left
			timeout = &ts
		}
		// An ordinary system call: the loop gives its P back while it
		// waits, and without a timeout it sleeps until a bucket at rest
		// takes a packet or the set of pacers changes.
		if _, err := unix.Ppoll(fds, timeout, nil); err != nil && err != unix.EINTR {
			l.failAll(fmt.Errorf("waiting: %w", err))
			return
		}
		loopThread.turns.Add(1)
		atomic.StoreUint64(l.ringPos(l.ringCons), atomic.LoadUint64(l.ringPos(l.ringProd))) // skip the wake records
		unix.Read(l.evfd, drain[:])
	}
}

// ringPos is the position at the start of a ring page.
func (l *loop) ringPos(page []byte) *uint64 { return (*uint64)(unsafe.Pointer(&page[0])) }

// noneDue: no pacer has an update scheduled.
const noneDue = math.MaxInt64

// turn updates every pacer that is due or was woken, and returns when the
// next update is due; stop is true when the loop must end.
func (l *loop) turn() (next int64, stop bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stop {
		return 0, true
	}
	now := monotonic()
	next = noneDue
	for i := 0; i < len(l.pacers); i++ {
		p := l.pacers[i]
		b := l.bucket(p.slot)
		if p.resting && !p.wake(b, now) {
			continue
		}
		if p.due <= now {
			if err := p.update(b, now); err != nil {
				p.fail(err)
				l.drop(i)
				i--
				continue
			}
		}
		if !p.resting {
			next = min(next, p.due)
		}
	}
	return next, false
}

// failAll stops every pacer's controller with err, and the loop.
func (l *loop) failAll(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stop = true
	for len(l.pacers) > 0 {
		l.pacers[0].fail(err)
		l.drop(0)
	}
}

// resyncEvery is how many updates may pass between two readings of the
// bucket class's own counters over netlink. The qdisc tracepoints now and
// then do not fire for a packet, in either direction (a few in ten
// thousand; see the README), and a packet counted in but never out would
// leave a backlog that never drains. So the loop corrects its counters
// from the class at most this many updates apart, and before it lets a
// pacer rest.
const resyncEvery = 16

// update runs p's rate controller once, at now, from its bucket's
// counters, and sets the bucket's rate when it moved enough.
func (p *Pacer) update(b *loopBucket, now int64) error {
	if p.sinceSync++; p.sinceSync >= resyncEvery {
		if _, err := p.resync(b); err != nil {
			return err
		}
	}
	in, out := p.counters(b)
	// M_r counts bytes that reached the bucket (and were not dropped):
	// those it sent plus the growth of its queue.
	arrived, backlog := max(float64(int64(in-p.prevIn)), 0), max(float64(int64(in-out)), 0)
	p.mu.Lock()
	r := p.ctl.step(arrived, time.Duration(now-p.prevAt), backlog)
	p.updates++
	p.mu.Unlock()
	p.prevIn, p.prevAt = in, now
	// The NetFPGA pacer sets its rate in 0.5 Mbps steps (§5.1); skip
	// netlink changes smaller than that.
	if math.Abs(r-p.lastSet)*8 >= 0.5e6 {
		if err := p.setRate(r); err != nil {
			return fmt.Errorf("setting bucket rate: %w", err)
		}
		p.lastSet = r
	}
	p.due = nextTick(now, p.cfg.RateInterval)
	if arrived == 0 && backlog == 0 && r == p.ctl.min {
		return p.rest(b)
	}
	return nil
}

// counters are the bytes into and out of the bucket so far, corrected by
// the latest resync.
func (p *Pacer) counters(b *loopBucket) (in, out uint64) {
	// Out before in: a packet counted out was counted in before, so the
	// backlog read is never negative.
	out = atomic.LoadUint64(&b.Out) + p.offOut
	in = atomic.LoadUint64(&b.In) + p.offIn
	return in, out
}

// resync sets p's corrections so that its counters agree with the bucket
// class's: sent bytes out, sent bytes and backlog in. It reports false,
// and leaves them, when a packet passed while the class was read.
func (p *Pacer) resync(b *loopBucket) (bool, error) {
	out0, in0 := atomic.LoadUint64(&b.Out), atomic.LoadUint64(&b.In)
	sent, backlog, err := p.readClass()
	if err != nil {
		return false, fmt.Errorf("bucket class counters: %w", err)
	}
	if atomic.LoadUint64(&b.Out) != out0 || atomic.LoadUint64(&b.In) != in0 {
		return false, nil // try again at the next update
	}
	p.offOut, p.offIn = sent-out0, sent+uint64(backlog)-in0
	p.sinceSync = 0
	return true, nil
}

// rest stops p's updates until its bucket takes a packet, once the
// class's own counters confirm that it holds nothing and took nothing
// since the last update: every update would leave the rate at the floor.
// The eBPF program clears the flag and wakes the loop at the bucket's next
// packet; a packet counted between the reading and the flag is seen here.
func (p *Pacer) rest(b *loopBucket) error {
	in, out := p.counters(b)
	if ok, err := p.resync(b); err != nil || !ok {
		return err
	}
	if in2, out2 := p.counters(b); in2 != in || out2 != out || in != p.prevIn {
		return nil // the class had more than the tracepoints saw: keep updating
	}
	raw := atomic.LoadUint64(&b.In)
	atomic.StoreUint32(&b.Resting, 1)
	if atomic.LoadUint64(&b.In) != raw {
		atomic.StoreUint32(&b.Resting, 0)
		return nil
	}
	p.resting = true
	return nil
}

// wake reports whether a resting pacer's bucket has taken a packet, and
// if so schedules its next update as if it had never rested: at the end
// of the interval the packet arrived in, and that interval counted from
// its start.
func (p *Pacer) wake(b *loopBucket, now int64) bool {
	if in, _ := p.counters(b); in == p.prevIn {
		return false
	}
	atomic.StoreUint32(&b.Resting, 0)
	p.resting = false
	p.due = nextTick(now, p.cfg.RateInterval)
	p.prevAt = p.due - int64(p.cfg.RateInterval)
	return true
}

// loopThread is the loop's thread, for its CPU time and wake-ups.
var loopThread threadClock

// threadClock follows the threads a loop runs on, one after another.
type threadClock struct {
	mu    sync.Mutex
	tid   int           // the running thread, 0 when none
	begun time.Duration // its CPU time when the loop took it over
	ended time.Duration // the loop's CPU time on threads that have exited
	turns atomic.Uint64
}

// start is called on the thread itself when the loop takes it over.
func (t *threadClock) start() {
	t.mu.Lock()
	t.tid, t.begun = unix.Gettid(), threadCPU(0)
	t.mu.Unlock()
}

// end is called on the thread itself, just before it exits.
func (t *threadClock) end() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ended += threadCPU(0) - t.begun
	t.tid = 0
}

// threadCPU is the CPU time of thread tid of this process (0: the
// calling thread).
func threadCPU(tid int) time.Duration {
	clock := int32(unix.CLOCK_THREAD_CPUTIME_ID)
	if tid != 0 {
		clock = int32(^tid<<3 | 6) // the kernel's per-thread CPUCLOCK_SCHED clock of tid
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(clock, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// LoopCPU is the CPU time the rate controller loop has used in this
// process, over every thread it has run on: what the pacers' control costs
// this machine beyond their eBPF programs.
func LoopCPU() time.Duration {
	loopThread.mu.Lock()
	defer loopThread.mu.Unlock()
	d := loopThread.ended
	if loopThread.tid != 0 {
		d += threadCPU(loopThread.tid) - loopThread.begun
	}
	return d
}

// LoopThread is the id of the loop's thread, 0 while no pacer runs in this
// process.
func LoopThread() int {
	loopThread.mu.Lock()
	defer loopThread.mu.Unlock()
	return loopThread.tid
}

// LoopTurns counts the loop's wake-ups in this process.
func LoopTurns() uint64 { return loopThread.turns.Load() }
