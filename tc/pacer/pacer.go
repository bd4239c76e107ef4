// Package pacer emulates HULL's NIC pacer (Alizadeh et al., "Less is More",
// §4.2 and Table 3) at a host's egress: a token bucket that only flows
// causing congestion go through, at a rate that tracks what those flows
// send.
//
// On the host NIC (one veth end inside the host's namespace):
//
//	clsact ingress  pacer_ingress: an ACK with ECE associates its flow with
//	                probability p_a (LRU flow table, entries time-stamped)
//	clsact egress   pacer_egress (filter priority 0x10, before tc's port
//	                programs at 0x100): a packet of an associated flow gets
//	                skb->priority = the bucket class; others pass on
//	                (TC_ACT_UNSPEC) to the next filter, if any
//	HTB root        the NIC's existing root (tc's port tree) or one the
//	                pacer creates: 1: → 1:1 at line rate → 1:2 default
//	  class :fe     the token bucket, rate = ceil = R, with a bfifo
//
// HTB takes skb->priority as the class before it runs its own filters, so
// the egress program works whether or not tc has put a port tree on the NIC.
// The rate controller runs every T_r from the bytes that entered and left
// the bucket, on the loop that serves every pacer of the process that
// called Start (loop.go); the pacer stops with that process.
package pacer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/fabric-emu/fabric/tc"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/fabric-emu/fabric/internal/netnsutil"
	"github.com/fabric-emu/fabric/internal/units"
)

// tc handles the pacer uses (major:minor, hex).
const (
	// filterPrio runs the pacer's filters before tc's port programs (0x100).
	filterPrio = 0x10
	// bucketMinor is the bucket class under the NIC's HTB root major;
	// tc's port trees use minors 1 and 0x10–0x17.
	bucketMinor = 0xfe
	// bucketQdiscMajor is the bucket's bfifo.
	bucketQdiscMajor = 0xfe
	// A tree the pacer builds itself when the NIC has none.
	ownMajor        = 1
	ownParentMinor  = 1
	ownDefaultMinor = 2
	frameQuantum    = 1600
)

// Pacer is a running pacer on one host NIC.
type Pacer struct {
	cfg    Config
	where  string // "nsPath:ifname", for errors
	nsPath string
	h      *netlink.Handle
	ifidx  int
	objs   pacerObjects

	major         uint16 // of the HTB root
	parent        uint32 // class (or root) the bucket hangs under
	bucket        uint32
	createdRoot   bool
	createdClsact bool

	netns uint32       // the namespace's inode number, as the eBPF programs see it
	nl    *classSocket // sets the bucket's rate
	// setRate sets the bucket's rate (bytes/s) in the kernel and
	// readClass reads its class's bytes sent and backlog: through nl, or
	// a test's stand-ins.
	setRate   func(r float64) error
	readClass func() (sent uint64, backlog uint32, err error)
	stopAfter func() bool // ends the ctx watch

	// The loop's, guarded by its lock: the bucket's slot, the next
	// update, the previous one's reading, the rate last set, and the
	// corrections to the eBPF counters from the class's own.
	slot          uint32
	due           int64
	resting       bool
	prevIn        uint64
	prevAt        int64
	lastSet       float64
	offIn, offOut uint64
	sinceSync     int

	mu      sync.Mutex
	ctl     controller
	updates uint64
	loopErr error
}

// Stats is a snapshot of a pacer.
type Stats struct {
	Rate          units.Rate // current bucket rate R
	Updates       uint64     // rate-controller iterations so far (none while at rest)
	ECEAcks       uint64     // ECE ACKs seen on ingress
	Associations  uint64     // flows associated (including re-associations)
	Paced         uint64     // packets sent through the bucket
	Expired       uint64     // associations ended by T_i
	BucketBytes   uint64     // bytes the bucket has sent
	BucketBacklog uint32     // bytes queued in the bucket now
	BucketDrops   uint32     // packets the bucket's FIFO dropped
}

// Start attaches a pacer to ifname inside the network namespace at nsPath
// and starts its rate controller, which runs until ctx ends or Stop.
// Start after tc has built the NIC's port tree (if any): a later tc.Apply
// replaces the HTB root and with it the bucket.
func Start(ctx context.Context, nsPath, ifname string, cfg Config) (*Pacer, error) {
	cfg, err := cfg.Resolve()
	if err != nil {
		return nil, fmt.Errorf("pacer: %w", err)
	}
	p := &Pacer{cfg: cfg, where: nsPath + ":" + ifname, nsPath: nsPath}
	var st unix.Stat_t
	if err := unix.Stat(nsPath, &st); err != nil {
		return nil, fmt.Errorf("pacer %s: %w", p.where, err)
	}
	p.netns = uint32(st.Ino) // the namespace's inode number is its ns.inum
	ns, err := netns.GetFromPath(nsPath)
	if err != nil {
		return nil, fmt.Errorf("pacer %s: %w", p.where, err)
	}
	defer ns.Close()
	p.h, err = netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("pacer %s: netlink: %w", p.where, err)
	}
	link, err := p.h.LinkByName(ifname)
	if err != nil {
		p.h.Close()
		return nil, fmt.Errorf("pacer %s: %w", p.where, err)
	}
	p.ifidx = link.Attrs().Index
	if err := p.setup(); err != nil {
		p.teardown()
		return nil, fmt.Errorf("pacer %s: %w", p.where, err)
	}
	if err := register(p); err != nil {
		p.teardown()
		return nil, fmt.Errorf("pacer %s: %w", p.where, err)
	}
	p.stopAfter = context.AfterFunc(ctx, func() { unregister(p) })
	return p, nil
}

func (p *Pacer) setup() error {
	var err error
	if p.nl, err = openClassSocket(p.nsPath); err != nil {
		return err
	}
	p.setRate = func(r float64) error { return p.nl.change(p.bucketClass(r)) }
	p.readClass = func() (uint64, uint32, error) { return p.nl.counters(p.ifidx, p.bucket) }
	if err := p.setupTree(); err != nil {
		return err
	}
	if err := p.loadPrograms(); err != nil {
		return err
	}
	return p.attachPrograms()
}

// setupTree finds or builds the HTB root and adds the bucket class.
func (p *Pacer) setupTree() error {
	qs, err := p.h.QdiscList(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Index: p.ifidx}})
	if err != nil {
		return fmt.Errorf("listing qdiscs: %w", err)
	}
	var root netlink.Qdisc
	for _, q := range qs {
		if q.Attrs().Parent == netlink.HANDLE_ROOT {
			root = q
		}
	}
	switch r := root.(type) {
	case *netlink.Htb:
		if err := p.adoptTree(r); err != nil {
			return err
		}
	default:
		if root != nil && root.Type() != "noqueue" {
			return fmt.Errorf("the NIC's root qdisc is %s; the pacer needs an HTB root or none", root.Type())
		}
		if err := p.buildTree(); err != nil {
			return err
		}
	}
	line := p.cfg.LineRate.BytesPerSecond()
	p.ctl = controller{
		eta: p.cfg.Eta, beta: p.cfg.Beta,
		min: max(p.cfg.MinRate.BytesPerSecond(), line/1000), max: line,
		rate: line, // unpaced until the first update: as if no pacer
	}
	p.bucket = netlink.MakeHandle(p.major, bucketMinor)
	if err := p.h.ClassReplace(p.bucketClass(p.ctl.rate)); err != nil {
		return fmt.Errorf("bucket class: %w", err)
	}
	return tc.ReplaceBfifo(p.nsPath, p.ifidx, netlink.MakeHandle(bucketQdiscMajor, 0), p.bucket, uint32(p.cfg.Buffer))
}

// adoptTree hangs the bucket in an existing HTB tree: under class major:1
// when it exists (tc's class at the port rate above several bands), so paced
// and unpaced traffic share the line rate; else under the root.
func (p *Pacer) adoptTree(root *netlink.Htb) error {
	p.major = uint16(root.Handle >> 16)
	p.parent = root.Handle
	classes, err := p.h.ClassList(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Index: p.ifidx}}, 0)
	if err != nil {
		return fmt.Errorf("listing classes: %w", err)
	}
	var widest uint64
	for _, c := range classes {
		hc, ok := c.(*netlink.HtbClass)
		if !ok || hc.Handle == netlink.MakeHandle(p.major, bucketMinor) {
			continue
		}
		if hc.Handle == netlink.MakeHandle(p.major, 1) {
			p.parent = hc.Handle
		}
		widest = max(widest, hc.Ceil*8)
	}
	if p.cfg.LineRate == 0 {
		if widest == 0 {
			return errors.New("line_rate unset and the NIC's HTB tree has no class to take it from")
		}
		p.cfg.LineRate = units.Rate(widest)
	}
	return nil
}

// buildTree gives a NIC without a tree one: everything not paced goes to the
// default class at line rate, as it would leave a real NIC.
func (p *Pacer) buildTree() error {
	if p.cfg.LineRate == 0 {
		return errors.New("line_rate is required: the NIC has no HTB tree to take it from")
	}
	line := p.cfg.LineRate.BitsPerSecond()
	p.major = ownMajor
	root := netlink.NewHtb(netlink.QdiscAttrs{LinkIndex: p.ifidx, Handle: netlink.MakeHandle(ownMajor, 0), Parent: netlink.HANDLE_ROOT})
	root.Defcls = ownDefaultMinor
	if err := p.h.QdiscReplace(root); err != nil {
		return fmt.Errorf("htb root: %w", err)
	}
	p.createdRoot = true
	p.parent = netlink.MakeHandle(ownMajor, ownParentMinor)
	burst := uint32(max(2*frameQuantum, float64(line)/8*100e-6)) // 100 µs at line rate
	if err := p.h.ClassReplace(p.htbClass(root.Handle, p.parent, float64(line), float64(line), burst)); err != nil {
		return fmt.Errorf("htb line-rate class: %w", err)
	}
	// The default class is guaranteed little and borrows the rest, so the
	// bucket's guaranteed R is honoured first.
	def := netlink.MakeHandle(ownMajor, ownDefaultMinor)
	if err := p.h.ClassReplace(p.htbClass(p.parent, def, float64(line)/100, float64(line), burst)); err != nil {
		return fmt.Errorf("htb default class: %w", err)
	}
	return nil
}

// bucketClass is the bucket at rate r (bytes/s): R is its ceiling, and it
// is guaranteed only min_rate. HTB lets a class send up to its guaranteed
// rate whatever its parent has left, so a bucket guaranteed R beside the
// NIC's band (guaranteed the line rate) let the host send up to twice the
// line rate (measured: 167–196 Mbit/s into a 100 Mbit switch port while a
// bucket drained). Guaranteed little, the bucket borrows R from the port
// class it shares with the band, and the host never exceeds the line.
func (p *Pacer) bucketClass(r float64) *netlink.HtbClass {
	return p.htbClass(p.parent, p.bucket, min(p.ctl.min, r)*8, r*8, uint32(p.cfg.Burst))
}

func (p *Pacer) htbClass(parent, handle uint32, rate, ceil float64, burst uint32) *netlink.HtbClass {
	return netlink.NewHtbClass(netlink.ClassAttrs{LinkIndex: p.ifidx, Parent: parent, Handle: handle},
		netlink.HtbClassAttrs{Rate: uint64(rate), Ceil: uint64(ceil), Buffer: burst, Cbuffer: burst, Quantum: frameQuantum})
}

// inNS runs fn on a thread inside the pacer's namespace.
func (p *Pacer) inNS(fn func() error) error { return netnsutil.Do(p.nsPath, fn) }

func (p *Pacer) loadPrograms() error {
	spec, err := loadPacer()
	if err != nil {
		return err
	}
	spec.Maps["assoc"].MaxEntries = uint32(p.cfg.Flows)
	for name, v := range map[string]any{
		"assoc_below":    uint32(math.Min(p.cfg.PAssoc*(1<<32), math.MaxUint32)),
		"idle_ns":        uint64(p.cfg.IdleTimeout.Nanoseconds()),
		"bucket_classid": p.bucket,
	} {
		if err := spec.Variables[name].Set(v); err != nil {
			return fmt.Errorf("setting %s: %w", name, err)
		}
	}
	if err := spec.LoadAndAssign(&p.objs, nil); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return fmt.Errorf("loading pacer programs: %+v", ve)
		}
		return fmt.Errorf("loading pacer programs: %w", err)
	}
	return nil
}

func (p *Pacer) attachPrograms() error {
	clsact := &netlink.Clsact{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: p.ifidx, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT}}
	if err := p.h.QdiscAdd(clsact); err == nil {
		p.createdClsact = true
	} else if !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("clsact: %w", err)
	}
	for _, f := range []struct {
		hook uint32
		prog *ebpf.Program
	}{{netlink.HANDLE_MIN_INGRESS, p.objs.PacerIngress}, {netlink.HANDLE_MIN_EGRESS, p.objs.PacerEgress}} {
		if err := p.h.FilterReplace(p.filter(f.hook, f.prog.FD())); err != nil {
			return fmt.Errorf("attaching %s: %w", f.prog, err)
		}
	}
	return nil
}

func (p *Pacer) filter(hook uint32, fd int) *netlink.BpfFilter {
	return &netlink.BpfFilter{
		FilterAttrs: netlink.FilterAttrs{LinkIndex: p.ifidx, Parent: hook, Handle: 1, Priority: filterPrio, Protocol: unix.ETH_P_ALL},
		Fd:          fd, Name: "fabric_pacer", DirectAction: true,
	}
}

func (p *Pacer) fail(err error) {
	p.mu.Lock()
	p.loopErr = fmt.Errorf("pacer %s: rate controller stopped: %w", p.where, err)
	p.mu.Unlock()
}

type bucketCounters struct {
	bytes   uint64
	backlog uint32
	drops   uint32
}

func (p *Pacer) bucketStats() (bucketCounters, error) {
	c, err := findBucket(p.h, p.ifidx, p.bucket)
	if err != nil {
		return bucketCounters{}, err
	}
	if c == nil || c.Statistics == nil || c.Statistics.Basic == nil || c.Statistics.Queue == nil {
		return bucketCounters{}, fmt.Errorf("bucket class %x:%x is gone", p.bucket>>16, p.bucket&0xffff)
	}
	return bucketCounters{c.Statistics.Basic.Bytes, c.Statistics.Queue.Backlog, c.Statistics.Queue.Drops}, nil
}

// findBucket returns the HTB class handle on interface ifidx, nil if there
// is none.
func findBucket(h *netlink.Handle, ifidx int, handle uint32) (*netlink.HtbClass, error) {
	classes, err := h.ClassList(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Index: ifidx}}, 0)
	if err != nil {
		return nil, fmt.Errorf("class statistics: %w", err)
	}
	for _, c := range classes {
		if hc, ok := c.(*netlink.HtbClass); ok && hc.Handle == handle {
			return hc, nil
		}
	}
	return nil, nil
}

// Bucket is a pacer's token bucket as the kernel holds it, readable from
// any process (the rate controller may run in another one).
type Bucket struct {
	Rate       units.Rate // R, the bucket's ceiling
	Guaranteed units.Rate // what HTB guarantees it (min_rate)
	Parent     uint32     // the HTB class it borrows from
	Backlog    uint32     // bytes queued
}

// ReadBucket reads the bucket on ifname in the namespace at nsPath; ok is
// false when the NIC has no pacer.
func ReadBucket(nsPath, ifname string) (b Bucket, ok bool, err error) {
	ns, err := netns.GetFromPath(nsPath)
	if err != nil {
		return b, false, err
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		return b, false, err
	}
	defer h.Close()
	link, err := h.LinkByName(ifname)
	if err != nil {
		return b, false, err
	}
	qs, err := h.QdiscList(link)
	if err != nil {
		return b, false, err
	}
	for _, q := range qs {
		if _, isHTB := q.(*netlink.Htb); !isHTB || q.Attrs().Parent != netlink.HANDLE_ROOT {
			continue
		}
		c, err := findBucket(h, link.Attrs().Index, netlink.MakeHandle(uint16(q.Attrs().Handle>>16), bucketMinor))
		if err != nil || c == nil {
			return b, false, err
		}
		b = Bucket{Rate: units.Rate(c.Ceil * 8), Guaranteed: units.Rate(c.Rate * 8), Parent: c.Parent}
		if c.Statistics != nil && c.Statistics.Queue != nil {
			b.Backlog = c.Statistics.Queue.Backlog
		}
		return b, true, nil
	}
	return b, false, nil
}

// Err reports why the rate controller stopped early, if it did.
func (p *Pacer) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.loopErr
}

// Associated counts the flows associated now (seen within T_i).
func (p *Pacer) Associated() (int, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil { // bpf_ktime_get_ns's clock
		return 0, err
	}
	now := uint64(ts.Nano())
	idle := uint64(p.cfg.IdleTimeout.Nanoseconds())
	var (
		key  pacerFlow
		last uint64
		n    int
	)
	it := p.objs.Assoc.Iterate()
	for it.Next(&key, &last) {
		if now < last || now-last <= idle {
			n++
		}
	}
	if err := it.Err(); err != nil {
		return 0, fmt.Errorf("pacer %s: flow table: %w", p.where, err)
	}
	return n, nil
}

// Indices of the programs' counters (enum in bpf/pacer.bpf.c).
const (
	cntECEAcks = iota
	cntAssociated
	cntPaced
	cntExpired
)

// counter sums one of the programs' per-CPU counters.
func (p *Pacer) counter(i uint32) (uint64, error) {
	var perCPU []uint64
	if err := p.objs.Counters.Lookup(i, &perCPU); err != nil {
		return 0, fmt.Errorf("pacer %s: counters: %w", p.where, err)
	}
	var sum uint64
	for _, v := range perCPU {
		sum += v
	}
	return sum, nil
}

// Stats returns the pacer's counters and current rate.
func (p *Pacer) Stats() (Stats, error) {
	var s Stats
	p.mu.Lock()
	s.Rate = units.Rate(p.ctl.rate * 8)
	s.Updates = p.updates
	p.mu.Unlock()
	for i, dst := range []*uint64{cntECEAcks: &s.ECEAcks, cntAssociated: &s.Associations, cntPaced: &s.Paced, cntExpired: &s.Expired} {
		v, err := p.counter(uint32(i))
		if err != nil {
			return s, err
		}
		*dst = v
	}
	b, err := p.bucketStats()
	if err != nil {
		return s, fmt.Errorf("pacer %s: %w", p.where, err)
	}
	s.BucketBytes, s.BucketBacklog, s.BucketDrops = b.bytes, b.backlog, b.drops
	return s, nil
}

// Config returns the resolved configuration the pacer runs with.
func (p *Pacer) Config() Config { return p.cfg }

// Stop ends the rate controller and removes everything Start added: the
// filters, the bucket class and its FIFO, and the HTB root and clsact when
// the pacer created them. Removing from a namespace that is already gone
// is not an error.
func (p *Pacer) Stop() error {
	if p.stopAfter != nil {
		p.stopAfter()
	}
	unregister(p)
	return p.teardown()
}

func (p *Pacer) teardown() error {
	var errs []error
	gone := func(err error) bool {
		return err == nil || errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENODEV) || errors.Is(err, unix.EINVAL)
	}
	if p.h == nil {
		return nil
	}
	for _, hook := range []uint32{netlink.HANDLE_MIN_INGRESS, netlink.HANDLE_MIN_EGRESS} {
		if err := p.h.FilterDel(p.filter(hook, 0)); !gone(err) {
			errs = append(errs, fmt.Errorf("removing filter: %w", err))
		}
	}
	switch {
	case p.createdRoot:
		root := &netlink.Htb{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: p.ifidx, Handle: netlink.MakeHandle(ownMajor, 0), Parent: netlink.HANDLE_ROOT}}
		if err := p.h.QdiscDel(root); !gone(err) {
			errs = append(errs, fmt.Errorf("removing htb root: %w", err))
		}
	case p.bucket != 0:
		c := &netlink.HtbClass{ClassAttrs: netlink.ClassAttrs{LinkIndex: p.ifidx, Parent: p.parent, Handle: p.bucket}}
		if err := p.h.ClassDel(c); !gone(err) {
			errs = append(errs, fmt.Errorf("removing bucket class: %w", err))
		}
	}
	if p.createdClsact {
		if p.noOtherFilters() {
			clsact := &netlink.Clsact{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: p.ifidx, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT}}
			if err := p.h.QdiscDel(clsact); !gone(err) {
				errs = append(errs, fmt.Errorf("removing clsact: %w", err))
			}
		}
	}
	p.objs.Close()
	p.nl.close()
	p.h.Close()
	p.h = nil
	if len(errs) > 0 {
		return fmt.Errorf("pacer %s: %w", p.where, errors.Join(errs...))
	}
	return nil
}

// noOtherFilters reports whether clsact carries no one else's programs
// (tc's port programs may have been attached after the pacer started).
func (p *Pacer) noOtherFilters() bool {
	l := &netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Index: p.ifidx}}
	for _, hook := range []uint32{netlink.HANDLE_MIN_INGRESS, netlink.HANDLE_MIN_EGRESS} {
		fs, err := p.h.FilterList(l, hook)
		if err != nil || len(fs) > 0 {
			return false
		}
	}
	return true
}
