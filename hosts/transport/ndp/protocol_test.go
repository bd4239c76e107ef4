package ndp

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/fabric-emu/fabric/hosts/transport"
	"github.com/fabric-emu/fabric/hosts/transport/transporttest"
)

// network joins endpoints in memory. Every packet may be lost, every DATA
// packet may be trimmed to its header as a full NDP queue would, and each
// packet is delivered after its own random delay, so packets overtake
// each other (as sprayed packets do on paths of different queues).
type network struct {
	mu        sync.Mutex
	rng       *rand.Rand
	loss      float64 // any packet
	chop      float64 // DATA packets, trimmed
	maxDelay  time.Duration
	endpoints map[netip.Addr]*endpoint
	dropped   int
	chopped   int
	paths     map[int]int         // DATA packets per source path
	cut       bool                // the network carries nothing more
	deaf      map[netip.Addr]bool // packets to these are lost (a stalled receiver's full buffer)
	unheard   int                 // packets lost to deafness
}

func (n *network) transmit(from netip.Addr) func(netip.Addr, int, []byte) {
	return func(dst netip.Addr, path int, b []byte) {
		pkt := append([]byte(nil), b...)
		n.mu.Lock()
		r := n.rng.Float64()
		delay := time.Duration(n.rng.Int64N(int64(n.maxDelay)))
		to := n.endpoints[dst]
		if n.cut {
			to = nil
		}
		if n.deaf[dst] {
			n.unheard++
			to = nil
		}
		isData := pkt[1]&flagData != 0
		if isData {
			n.paths[path]++
		}
		switch {
		case r < n.loss:
			n.dropped++
			to = nil
		case isData && r < n.loss+n.chop:
			n.chopped++
			pkt = chop(pkt)
		}
		n.mu.Unlock()
		if to != nil {
			time.AfterFunc(delay, func() { to.handle(from, pkt) })
		}
	}
}

// delivery checks what one receiver's application gets: every message's
// bytes in order, each byte once, each the byte its sender wrote there.
type delivery struct {
	mu   sync.Mutex
	next map[uint64]int64 // the next offset expected
	errs []error
}

func (d *delivery) deliver(id uint64, off int64, b []byte) {
	d.mu.Lock()
	defer d.mu.Unlock()
	want := make([]byte, len(b))
	fill(want, id, off)
	switch {
	case off != d.next[id]:
		d.errs = append(d.errs, fmt.Errorf("message %d: delivered offset %d, want %d", id, off, d.next[id]))
	case !bytes.Equal(b, want):
		d.errs = append(d.errs, fmt.Errorf("message %d: wrong bytes at offset %d", id, off))
	}
	d.next[id] = off + int64(len(b))
}

// pair starts two endpoints on net, each with its own records file, and
// returns them with a function that stops both and returns their records.
func pair(t *testing.T, net *network, sched []transport.Message, dl *delivery) ([2]*endpoint, func() *transport.Set) {
	t.Helper()
	var eps [2]*endpoint
	n := 0
	stop := transporttest.Pair(t, 200e6, func(env *transport.Env, w *transport.Writer, goes func(func(context.Context))) {
		args, err := withDefaults(env, Args{RTO: transport.Duration(20 * time.Millisecond), PrioBelow: 3000})
		if err != nil {
			t.Fatal(err)
		}
		e := newEndpoint(env, args, w, sched, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
		e.tx = net.transmit(env.Addr)
		e.deliver = dl.deliver
		net.endpoints[env.Addr] = e
		eps[n] = e
		n++
		goes(e.timers)
		goes(e.sendLoop)
		goes(e.pullLoop)
	})
	return eps, stop
}

// Messages of every size from 1 byte to 3 MB, both ways at once, cross a
// network that trims 10 % of DATA packets, loses 2 % of all packets (data,
// headers, ACKs, NACKs, PULLs) and reorders them: each is delivered to the
// application exactly once, in order, byte for byte, and recorded once;
// trimmed packets were NACKed and resent, lost ones resent on the RTO, and
// DATA was sprayed over every source port.
func TestDeliveredOnceInOrderUnderTrimsLossAndReordering(t *testing.T) {
	net := &network{rng: rand.New(rand.NewPCG(1, 2)), loss: 0.02, chop: 0.10, maxDelay: 300 * time.Microsecond,
		endpoints: map[netip.Addr]*endpoint{}, paths: map[int]int{}}
	sizes := []int64{1, 2, 100, 1451, 1452, 1453, 2904, 3000, 9999, 50000, 100000, 1 << 20, 3 << 20}
	var sched []transport.Message
	addr := map[string]netip.Addr{"a": netip.MustParseAddr("10.0.0.1"), "b": netip.MustParseAddr("10.0.0.2")}
	for i, x := range sizes {
		for dir := range 2 {
			src, dst := "a", "b"
			if dir == 1 {
				src, dst = dst, src
			}
			sched = append(sched, transport.Message{ID: uint64(2*i + dir + 1), Src: src, Dst: dst, Size: x, DstAddr: addr[dst]})
		}
	}
	dl := &delivery{next: map[uint64]int64{}}
	eps, stop := pair(t, net, sched, dl)
	for _, m := range sched {
		eps[map[string]int{"a": 0, "b": 1}[m.Src]].start(m)
	}
	waitIdle(t, eps[:], 60*time.Second)
	set := stop()
	checkRecords(t, sched, set)
	dl.mu.Lock()
	for _, err := range dl.errs {
		t.Error(err)
	}
	for _, m := range sched {
		if dl.next[m.ID] != m.Size {
			t.Errorf("message %d: %d of %d bytes delivered", m.ID, dl.next[m.ID], m.Size)
		}
	}
	dl.mu.Unlock()
	var st Stats
	var mostSent int64 // by one endpoint: each sprays from its own first port on
	for _, e := range eps {
		e.mu.Lock()
		mostSent = max(mostSent, e.stats.DataSent)
		st.Trims += e.stats.Trims
		st.Nacks += e.stats.Nacks
		st.RTOs += e.stats.RTOs
		st.Retransmitted += e.stats.Retransmitted
		st.Dups += e.stats.Dups
		st.Pulls += e.stats.Pulls
		e.mu.Unlock()
	}
	t.Logf("network: %d dropped, %d trimmed; endpoints: %d trims seen, %d NACKs, %d retransmitted (%d after an RTO), %d duplicates, %d PULLs; DATA from %d source ports",
		net.dropped, net.chopped, st.Trims, st.Nacks, st.Retransmitted, st.RTOs, st.Dups, st.Pulls, len(net.paths))
	if st.Trims == 0 || st.Nacks == 0 || st.RTOs == 0 || st.Retransmitted < st.Nacks/2 {
		t.Errorf("recovery was not exercised: %+v", st)
	}
	if want := min(DefaultPaths, int(mostSent)); len(net.paths) != want {
		t.Errorf("DATA left from %d source ports, want %d (one per packet in turn)", len(net.paths), want)
	}
}

// A receiver that stalls three times for 100 ms in the middle of a
// transfer (its packet handling, timers and pull loop all wait on its
// lock, and what arrives meanwhile is lost, as in a full socket buffer)
// still gets every message exactly once, in order: the sender's timeouts
// and the receiver's repeated PULLs restart the transfer each time.
func TestDeliveredOnceWithAStallingReceiver(t *testing.T) {
	net := &network{rng: rand.New(rand.NewPCG(3, 4)), maxDelay: 300 * time.Microsecond,
		endpoints: map[netip.Addr]*endpoint{}, paths: map[int]int{}, deaf: map[netip.Addr]bool{}}
	b := netip.MustParseAddr("10.0.0.2")
	var sched []transport.Message
	for i, x := range []int64{1, 1452, 50000, 1 << 20, 3 << 20, 2 << 20} {
		sched = append(sched, transport.Message{ID: uint64(i + 1), Src: "a", Dst: "b", Size: x, DstAddr: b})
	}
	dl := &delivery{next: map[uint64]int64{}}
	eps, stop := pair(t, net, sched, dl)
	for _, m := range sched {
		eps[0].start(m)
	}
	var delivered []int64 // bytes delivered when each stall began
	for range 3 {
		time.Sleep(50 * time.Millisecond)
		eps[1].mu.Lock()
		net.mu.Lock()
		net.deaf[b] = true
		net.mu.Unlock()
		dl.mu.Lock()
		var got int64
		for _, n := range dl.next {
			got += n
		}
		dl.mu.Unlock()
		delivered = append(delivered, got)
		time.Sleep(100 * time.Millisecond)
		net.mu.Lock()
		net.deaf[b] = false
		net.mu.Unlock()
		eps[1].mu.Unlock()
	}
	waitIdle(t, eps[:], 60*time.Second)
	set := stop()
	checkRecords(t, sched, set)
	dl.mu.Lock()
	defer dl.mu.Unlock()
	for _, err := range dl.errs {
		t.Error(err)
	}
	var total int64
	for _, m := range sched {
		total += m.Size
		if dl.next[m.ID] != m.Size {
			t.Errorf("message %d: %d of %d bytes delivered", m.ID, dl.next[m.ID], m.Size)
		}
	}
	net.mu.Lock()
	unheard := net.unheard
	net.mu.Unlock()
	t.Logf("bytes delivered when each stall began: %v of %d; %d packets lost to the stalls", delivered, total, unheard)
	if unheard == 0 || delivered[0] == 0 || delivered[len(delivered)-1] >= total {
		t.Errorf("the stalls did not fall in the transfer (delivered %v of %d, %d packets lost to them)", delivered, total, unheard)
	}
}

// waitIdle waits until no endpoint has a message left to send or receive.
func waitIdle(t *testing.T, eps []*endpoint, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		busy := false
		for _, e := range eps {
			e.mu.Lock()
			busy = busy || len(e.outgoing) > 0 || len(e.incoming) > 0
			e.mu.Unlock()
		}
		if !busy {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Errorf("still busy after %v", limit)
}

// checkRecords checks that each scheduled message has exactly one flow
// record, with its size, source and destination.
func checkRecords(t testing.TB, sched []transport.Message, set *transport.Set) {
	t.Helper()
	byID := map[uint64]transport.Message{}
	for _, m := range sched {
		byID[m.ID] = m
	}
	got := map[uint64]int{}
	for _, f := range set.Flows {
		got[f.ID]++
		want := byID[f.ID]
		if f.Bytes != want.Size || f.Size != want.Size || f.Src != want.Src || f.Dst != want.Dst || f.CC != "ndp" {
			t.Errorf("record %+v for message %+v", f, want)
		}
	}
	for _, m := range sched {
		if got[m.ID] != 1 {
			t.Errorf("message %d (%d B, %s→%s) recorded %d times", m.ID, m.Size, m.Src, m.Dst, got[m.ID])
		}
	}
}

// The pull queue serves senders in turn, whatever order their PULLs were
// queued in, after a priority message, which keeps the head for as long
// as it has packets neither held nor on their way, however few PULLs its
// arrivals earned.
func TestPullQueuePriorityThenRoundRobin(t *testing.T) {
	q := newPullQueue()
	a, b := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	a1, a2, b1 := &inMsg{id: 1, src: a}, &inMsg{id: 2, src: a}, &inMsg{id: 3, src: b}
	p := &inMsg{id: 4, src: b, prio: true, n: 5, inflight: 2} // 3 packets to pull
	for _, im := range []*inMsg{a1, a1, a2, a1, b1, b1, p, p} {
		q.push(im)
	}
	var got []uint64
	for im := q.pop(); im != nil; im = q.pop() {
		got = append(got, im.id)
		im.inflight++ // what Next does for the PULL it sends
	}
	if want := []uint64{4, 4, 4, 1, 3, 1, 3, 2, 1}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("pull order %v, want %v", got, want)
	}
	if a1.queued != 0 || b1.queued != 0 || p.queued != 0 || len(q.prio) != 0 {
		t.Errorf("after the queue drained: queued PULLs a1 %d, b1 %d, p %d (want 0), %d priority messages left",
			a1.queued, b1.queued, p.queued, len(q.prio))
	}
}

// A trimmed header keeps everything the receiver needs: flags with
// CHOPPED, the message, the packet number and the message size.
func TestHeaderSurvivesTrimming(t *testing.T) {
	b := make([]byte, HeaderLen+100)
	h := header{flags: flagData | flagLast | flagPrio, length: 100, id: 1 << 40, seq: 7, aux: 12345}
	h.put(b)
	got, err := parseHeader(chop(b))
	if err != nil {
		t.Fatal(err)
	}
	if want := h; got.flags != want.flags|flagChopped || got.id != want.id || got.seq != want.seq || got.aux != want.aux || got.length != 100 {
		t.Errorf("trimmed header %+v, want %+v with CHOPPED", got, want)
	}
	if _, err := parseHeader(b[:HeaderLen+50]); err == nil {
		t.Error("a whole DATA packet shorter than its length parsed")
	}
}

// A stream (the contract's long-lived flow) runs until the endpoints
// stop, through trims, loss and reordering: its bytes arrive in order,
// samples grow, and one flow record at the end says what was delivered.
func TestStreamUntilStopped(t *testing.T) {
	net := &network{rng: rand.New(rand.NewPCG(3, 4)), loss: 0.02, chop: 0.10, maxDelay: 300 * time.Microsecond,
		endpoints: map[netip.Addr]*endpoint{}, paths: map[int]int{}}
	sched := []transport.Message{{ID: 7, Src: "a", Dst: "b", Stream: true, DstAddr: netip.MustParseAddr("10.0.0.2"), Pattern: "permutation"}}
	dl := &delivery{next: map[uint64]int64{}}
	eps, stop := pair(t, net, sched, dl)
	eps[0].start(sched[0])
	time.Sleep(500 * time.Millisecond)
	net.mu.Lock()
	net.cut = true
	net.mu.Unlock()
	time.Sleep(20 * time.Millisecond) // what is on its way arrives
	eps[1].mu.Lock()
	eps[1].endStreams()
	eps[1].mu.Unlock()
	set := stop()
	dl.mu.Lock()
	defer dl.mu.Unlock()
	for _, err := range dl.errs {
		t.Error(err)
	}
	if len(set.Flows) != 1 || set.Flows[0].Bytes != dl.next[7] || dl.next[7] < 256<<10 {
		t.Errorf("stream records %+v, %d bytes delivered in order (want ≥ 256 KB in 0.5 s: the in-memory network's timers are coarse)", set.Flows, dl.next[7])
	}
	if len(set.Samples) < 3 || set.Samples[len(set.Samples)-1].Bytes <= set.Samples[0].Bytes {
		t.Errorf("samples %+v: want at least 3, growing", set.Samples)
	}
	t.Logf("stream: %d bytes delivered in 0.5 s, %d samples", dl.next[7], len(set.Samples))
}
