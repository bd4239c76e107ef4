package pacer

import (
	"context"
	"fmt"
	"math"
	"os"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/fabric-emu/fabric/hosts/cc"
	"github.com/fabric-emu/fabric/hosts/cc/cctest"
	"github.com/fabric-emu/fabric/internal/testenv"
	"github.com/fabric-emu/fabric/internal/units"
	"github.com/fabric-emu/fabric/tc"
)

const lineRate = 100 * units.Rate(1e6)

func ensureDCTCP(t *testing.T) string {
	t.Helper()
	release, info, err := cc.Ensure(context.Background(), cc.DCTCP)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { release() })
	return info.Name
}

func rootQdisc(t *testing.T, h *cctest.Host) netlink.Qdisc {
	t.Helper()
	l, err := h.Handle.LinkByName(h.If)
	if err != nil {
		t.Fatal(err)
	}
	qs, err := h.Handle.QdiscList(l)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		if q.Attrs().Parent == netlink.HANDLE_ROOT {
			return q
		}
	}
	return nil
}

// TestPacerAssociatesMarkedFlows runs a DCTCP flow from A to B with 20% of
// its segments CE-marked on arrival at B. A's pacer must see the ECE ACKs,
// associate the flow, send its packets through the bucket, and keep the
// flow near line rate while the controller adjusts R. Stop must leave A's
// NIC as it was.
func TestPacerAssociatesMarkedFlows(t *testing.T) {
	testenv.RequireRoot(t)
	name := ensureDCTCP(t)
	p := cctest.NewPair(t, "pc")
	p.B.MarkCE(t, 0.2)

	pc, err := Start(context.Background(), p.A.Path(), p.A.If, Config{LineRate: lineRate})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			pc.Stop()
		}
	})
	if q := rootQdisc(t, p.A); q == nil || q.Type() != "htb" {
		t.Fatalf("no HTB root on A after Start: %v", q)
	}

	// A stall longer than T_i leaves the flow idle past it and ends its
	// association, with no fault of the pacer's.
	testenv.Retry(t, 3, DefaultIdleTimeout, func(a *testenv.Attempt) {
		s0, err := pc.Stats()
		if err != nil {
			t.Fatal(err)
		}
		// Sample the association table while the flow runs.
		assoc := make(chan int, 1)
		go func() {
			time.Sleep(time.Second)
			n, err := pc.Associated()
			if err != nil {
				t.Error(err)
			}
			assoc <- n
		}()
		x, err := p.Send(name, 5100+a.N, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		during := <-assoc
		s1, err := pc.Stats()
		if err != nil {
			t.Fatal(err)
		}
		s := statsSince(s1, s0)
		a.Logf("attempt %d: flow %.1f Mbit/s over %s; pacer: %+v; associated mid-flow: %d", a.N, x.Mbps(), x.SenderCC, s, during)
		if err := pc.Err(); err != nil {
			t.Fatal(err)
		}
		if during < 1 {
			a.Errorf("no flow associated during a marked DCTCP transfer")
		}
		if s.ECEAcks == 0 || s.Associations == 0 || s.Paced == 0 || s.BucketBytes == 0 {
			a.Errorf("pacer did not pace: %+v", s)
		}
		// 2 s at T_r = 1 ms: a loop that cannot keep up shows here.
		if s.Updates < 500 {
			a.Errorf("rate controller ran %d times in 2 s", s.Updates)
		}
		if mbps := x.Mbps(); mbps < 0.5*float64(lineRate.BitsPerSecond())/1e6 {
			a.Errorf("paced flow reached %.1f Mbit/s of %v", mbps, lineRate)
		}
	})

	checkBucketBytes(t, pc)

	// Association ends after T_i idle.
	time.Sleep(3 * DefaultIdleTimeout)
	if n, err := pc.Associated(); err != nil || n != 0 {
		t.Errorf("associated %d flows (%v) %v after the flow ended", n, err, 3*DefaultIdleTimeout)
	}

	stopped = true
	if err := pc.Stop(); err != nil {
		t.Fatal(err)
	}
	if q := rootQdisc(t, p.A); q != nil && q.Type() != "noqueue" {
		t.Errorf("Stop left root qdisc %s", q.Type())
	}
}

// checkBucketBytes waits, after the traffic, for the pacer to rest (its
// rate decays to the floor in about 52 updates), which it does only once
// the bucket class's own counters agree that nothing is queued: then the
// bytes the controller counted into and out of the bucket are the class's
// exactly. How far the eBPF counters alone fell short is logged.
func checkBucketBytes(t *testing.T, pc *Pacer) {
	t.Helper()
	var rested bool
	var in, out, rawIn, rawOut uint64
	for deadline := time.Now().Add(5 * time.Second); !rested && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		rested, in, out, rawIn, rawOut = pc.loopState()
	}
	s, err := pc.Stats()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the class sent %d bytes; the loop counted %d in and %d out, of which the tracepoints alone %d and %d", s.BucketBytes, in, out, rawIn, rawOut)
	if !rested {
		t.Fatalf("the pacer did not rest after its traffic: %+v", s)
	}
	if out != s.BucketBytes || in != out || s.BucketBacklog != 0 {
		t.Errorf("at rest the loop counted %d bytes into the bucket and %d out; the kernel's class sent %d and holds %d",
			in, out, s.BucketBytes, s.BucketBacklog)
	}
}

// loopState is whether p rests, and what the loop has counted into and
// out of its bucket: corrected by the class's counters, and by the eBPF
// programs alone.
func (p *Pacer) loopState() (resting bool, in, out, rawIn, rawOut uint64) {
	loopMu.Lock()
	defer loopMu.Unlock()
	theLoop.mu.Lock()
	defer theLoop.mu.Unlock()
	b := theLoop.bucket(p.slot)
	in, out = p.counters(b)
	return p.resting, in, out, b.In, b.Out
}

// TestPacerRestsWhenIdle starts a pacer on a NIC that sends nothing. Its
// rate decays from the line rate to the floor in ceil(ln 1000 /
// ln(1/(1-η))) updates, 52, and then it rests: over the next second the
// loop does not wake at all (updating every T_r, it woke 1000 times).
func TestPacerRestsWhenIdle(t *testing.T) {
	testenv.RequireRoot(t)
	p := cctest.NewPair(t, "pr")
	pc, err := Start(context.Background(), p.A.Path(), p.A.If, Config{LineRate: lineRate})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Stop()
	want := uint64(math.Ceil(math.Log(1000) / math.Log(1/(1-pc.Config().Eta))))
	updates := func() uint64 {
		s, err := pc.Stats()
		if err != nil {
			t.Fatal(err)
		}
		return s.Updates
	}
	for deadline := time.Now().Add(10 * time.Second); updates() < want && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	turns, cpu := LoopTurns(), LoopCPU()
	time.Sleep(time.Second)
	turns, cpu = LoopTurns()-turns, LoopCPU()-cpu
	t.Logf("an idle second at rest: %d wake-ups, %v of loop CPU; %d updates before it", turns, cpu, updates())
	if n := updates(); n != want {
		t.Errorf("%d updates, want %d: the decay to the floor and no more", n, want)
	}
	if turns != 0 {
		t.Errorf("the loop woke %d times in an idle second, want 0", turns)
	}
}

// statsSince is what the pacer counted between two readings; the rate and
// the bucket's backlog are the later reading's.
func statsSince(s, before Stats) Stats {
	s.Updates -= before.Updates
	s.ECEAcks -= before.ECEAcks
	s.Associations -= before.Associations
	s.Paced -= before.Paced
	s.Expired -= before.Expired
	s.BucketBytes -= before.BucketBytes
	s.BucketDrops -= before.BucketDrops
	return s
}

// TestPacerJoinsPortTree starts the pacer on a NIC that already has a
// port-style HTB tree (root 1:, class 1:1 at the line rate, default leaf
// 1:10): the bucket must hang under 1:1, take the line rate from it, and
// Stop must leave the port's tree intact.
func TestPacerJoinsPortTree(t *testing.T) {
	testenv.RequireRoot(t)
	p := cctest.NewPair(t, "pt")
	l, err := p.A.Handle.LinkByName(p.A.If)
	if err != nil {
		t.Fatal(err)
	}
	idx := l.Attrs().Index
	root := netlink.NewHtb(netlink.QdiscAttrs{LinkIndex: idx, Handle: netlink.MakeHandle(1, 0), Parent: netlink.HANDLE_ROOT})
	root.Defcls = 0x10
	if err := p.A.Handle.QdiscAdd(root); err != nil {
		t.Fatal(err)
	}
	rate := lineRate.BitsPerSecond()
	for _, c := range []struct{ parent, handle uint32 }{
		{root.Handle, netlink.MakeHandle(1, 1)},
		{netlink.MakeHandle(1, 1), netlink.MakeHandle(1, 0x10)},
	} {
		cl := netlink.NewHtbClass(netlink.ClassAttrs{LinkIndex: idx, Parent: c.parent, Handle: c.handle},
			netlink.HtbClassAttrs{Rate: rate, Ceil: rate, Quantum: 1600})
		if err := p.A.Handle.ClassAdd(cl); err != nil {
			t.Fatal(err)
		}
	}

	pc, err := Start(context.Background(), p.A.Path(), p.A.If, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if got := pc.Config().LineRate; got != lineRate {
		t.Errorf("line rate taken from the tree: %v, want %v", got, lineRate)
	}
	classes, err := p.A.Handle.ClassList(l, 0)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, c := range classes {
		if c.Attrs().Handle == netlink.MakeHandle(1, bucketMinor) {
			found = true
			if c.Attrs().Parent != netlink.MakeHandle(1, 1) {
				t.Errorf("bucket under %x, want 1:1", c.Attrs().Parent)
			}
		}
	}
	if !found {
		t.Fatal("no bucket class 1:fe")
	}
	if err := pc.Stop(); err != nil {
		t.Fatal(err)
	}
	if q := rootQdisc(t, p.A); q == nil || q.Attrs().Handle != root.Handle {
		t.Fatalf("Stop removed the port's root: %v", q)
	}
	classes, _ = p.A.Handle.ClassList(l, 0)
	if len(classes) != 2 {
		t.Errorf("after Stop the port tree has %d classes, want its 2", len(classes))
	}
}

// TestPacerBeforePortPrograms runs the pacer on a NIC that tc has made a
// two-band port (HTB 1: → 1:1 → 1:10, 1:11, and tc's eBPF classifier at
// clsact egress, filter priority 0x100). The pacer's filter must run first
// and send associated flows to its bucket under 1:1, tc's classifier must
// still classify the rest, and Stop must leave tc's port as it was.
func TestPacerBeforePortPrograms(t *testing.T) {
	testenv.RequireRoot(t)
	name := ensureDCTCP(t)
	p := cctest.NewPair(t, "pp")
	lab := fmt.Sprintf("tpp%d", os.Getpid())
	target := tc.Target{Lab: lab, Node: "a", Ifname: p.A.If, NetNS: p.A.Path(), PeerNode: "b", PeerIfname: p.B.If, PeerNetNS: p.B.Path()}
	port, err := tc.PortSettings{Queues: &tc.QueuesSpec{Bands: 2}}.Resolve(lineRate, 1500)
	if err != nil {
		t.Fatal(err)
	}
	if err := tc.Apply(context.Background(), target, port); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		tc.Remove(context.Background(), target)
		tc.ForgetLab(lab)
	})
	l, err := p.A.Handle.LinkByName(p.A.If)
	if err != nil {
		t.Fatal(err)
	}
	egressFilters := func() []netlink.Filter {
		fs, err := p.A.Handle.FilterList(l, netlink.HANDLE_MIN_EGRESS)
		if err != nil {
			t.Fatal(err)
		}
		return fs
	}
	before := egressFilters()
	if len(before) == 0 {
		t.Fatal("tc attached no egress classifier to a two-band port")
	}
	p.B.MarkCE(t, 0.2)

	pc, err := Start(context.Background(), p.A.Path(), p.A.If, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if got := len(egressFilters()); got != len(before)+1 {
		t.Errorf("egress filters after Start: %d, want tc's %d + the pacer's", got, len(before))
	}
	x, err := p.Send(name, 5102, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	s, err := pc.Stats()
	if err != nil {
		t.Fatal(err)
	}
	classes, err := p.A.Handle.ClassList(l, 0)
	if err != nil {
		t.Fatal(err)
	}
	var bandBytes uint64
	for _, c := range classes {
		a := c.Attrs()
		if (a.Handle == netlink.MakeHandle(1, 0x10) || a.Handle == netlink.MakeHandle(1, 0x11)) && a.Statistics != nil && a.Statistics.Basic != nil {
			bandBytes += a.Statistics.Basic.Bytes
		}
	}
	t.Logf("flow %.1f Mbit/s; pacer %+v; tc bands carried %d bytes", x.Mbps(), s, bandBytes)
	checkBucketBytes(t, pc)
	if s.Paced == 0 || s.BucketBytes == 0 {
		t.Errorf("nothing went through the bucket: %+v", s)
	}
	if bandBytes == 0 {
		t.Error("tc's bands carried nothing: unassociated packets (the handshake, the flow's start) must still reach them")
	}
	if err := pc.Stop(); err != nil {
		t.Fatal(err)
	}
	if got := len(egressFilters()); got != len(before) {
		t.Errorf("egress filters after Stop: %d, want tc's %d", got, len(before))
	}
	if q := rootQdisc(t, p.A); q == nil || q.Type() != "htb" {
		t.Errorf("Stop removed tc's root: %v", q)
	}
}
