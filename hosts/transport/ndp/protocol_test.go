package ndp

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/fabric-emu/fabric/hosts/transport"
	"github.com/fabric-emu/fabric/hosts/transport/transporttest"
)

// lossy is the in-memory network of these tests: it loses a share of
// every packet and trims a share of DATA packets to their header, as a
// full NDP queue would.
func lossy(seed uint64, loss, trim float64) *transporttest.Network {
	net := transporttest.NewNetwork(seed)
	net.Loss, net.Trim, net.MaxDelay = loss, trim, 300*time.Microsecond
	net.Chop = func(pkt []byte) []byte {
		if pkt[1]&flagData == 0 {
			return nil
		}
		return chop(pkt)
	}
	return net
}

// pathsUsed counts the source paths endpoints sent DATA from.
type pathsUsed struct {
	mu    sync.Mutex
	paths map[int]int
}

func (p *pathsUsed) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.paths)
}

// pair starts two endpoints on net, each with its own records file, and
// returns them with a function that stops both and returns their records;
// paths, if not nil, counts the source paths of their DATA.
func pair(t *testing.T, net *transporttest.Network, sched []transport.Message, dl *transporttest.Delivery, paths *pathsUsed) ([2]*endpoint, func() *transport.Set) {
	t.Helper()
	var eps [2]*endpoint
	n := 0
	stop := transporttest.Pair(t, 200e6, func(env *transport.Env, w *transport.Writer, goes func(func(context.Context))) {
		args, err := withDefaults(env, Args{RTO: transport.Duration(20 * time.Millisecond), PrioBelow: 3000})
		if err != nil {
			t.Fatal(err)
		}
		e := newEndpoint(env, args, w, sched, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
		e.tx = func(dst netip.Addr, path int, b []byte) {
			if paths != nil && b[1]&flagData != 0 {
				paths.mu.Lock()
				paths.paths[path]++
				paths.mu.Unlock()
			}
			net.Send(env.Addr, dst, b)
		}
		e.deliver = dl.Deliver
		net.Attach(env.Addr, e.handle)
		eps[n] = e
		n++
		goes(e.timers)
		goes(e.sendLoop)
		goes(e.pullLoop)
	})
	return eps, stop
}

// newDelivery is an application that checks it gets every message's bytes
// in order, each byte once, each the byte its sender wrote there.
func newDelivery() *transporttest.Delivery { return transporttest.NewDelivery(fill) }

// Messages of every size from 1 byte to 3 MB, both ways at once, cross a
// network that trims 10 % of DATA packets, loses 2 % of all packets (data,
// headers, ACKs, NACKs, PULLs) and reorders them: each is delivered to the
// application exactly once, in order, byte for byte, and recorded once;
// trimmed packets were NACKed and resent, lost ones resent on the RTO, and
// DATA was sprayed over every source port.
func TestDeliveredOnceInOrderUnderTrimsLossAndReordering(t *testing.T) {
	net := lossy(1, 0.02, 0.10)
	sizes := []int64{1, 2, 100, 1451, 1452, 1453, 2904, 3000, 9999, 50000, 100000, 1 << 20, 3 << 20}
	sched := transporttest.BothWays(sizes)
	dl, paths := newDelivery(), &pathsUsed{paths: map[int]int{}}
	eps, stop := pair(t, net, sched, dl, paths)
	for _, m := range sched {
		eps[map[string]int{"a": 0, "b": 1}[m.Src]].start(m)
	}
	waitIdle(t, eps[:], 60*time.Second)
	checkRecords(t, sched, stop())
	dl.Check(t, sched)
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
	c := net.Counts()
	t.Logf("network: %d dropped, %d trimmed; endpoints: %d trims seen, %d NACKs, %d retransmitted (%d after an RTO), %d duplicates, %d PULLs; DATA from %d source ports",
		c.Dropped, c.Trimmed, st.Trims, st.Nacks, st.Retransmitted, st.RTOs, st.Dups, st.Pulls, paths.count())
	if st.Trims == 0 || st.Nacks == 0 || st.RTOs == 0 || st.Retransmitted < st.Nacks/2 {
		t.Errorf("recovery was not exercised: %+v", st)
	}
	if want := min(DefaultPaths, int(mostSent)); paths.count() != want {
		t.Errorf("DATA left from %d source ports, want %d (one per packet in turn)", paths.count(), want)
	}
}

// A receiver that stalls three times for 100 ms in the middle of a
// transfer (its packet handling, timers and pull loop all wait on its
// lock, and what arrives meanwhile is lost, as in a full socket buffer)
// still gets every message exactly once, in order: the sender's timeouts
// and the receiver's repeated PULLs restart the transfer each time.
func TestDeliveredOnceWithAStallingReceiver(t *testing.T) {
	net := lossy(3, 0, 0)
	b := transporttest.Peers[1]
	var sched []transport.Message
	for i, x := range []int64{1, 1452, 50000, 1 << 20, 3 << 20, 2 << 20} {
		sched = append(sched, transport.Message{ID: uint64(i + 1), Src: "a", Dst: b.Name, Size: x, DstAddr: b.Addr})
	}
	dl := newDelivery()
	eps, stop := pair(t, net, sched, dl, nil)
	for _, m := range sched {
		eps[0].start(m)
	}
	var delivered []int64 // bytes delivered when each stall began
	for range 3 {
		time.Sleep(50 * time.Millisecond)
		eps[1].mu.Lock()
		net.Deafen(b.Addr, true)
		delivered = append(delivered, dl.Bytes())
		time.Sleep(100 * time.Millisecond)
		net.Deafen(b.Addr, false)
		eps[1].mu.Unlock()
	}
	waitIdle(t, eps[:], 60*time.Second)
	checkRecords(t, sched, stop())
	dl.Check(t, sched)
	var total int64
	for _, m := range sched {
		total += m.Size
	}
	unheard := net.Counts().Unheard
	t.Logf("bytes delivered when each stall began: %v of %d; %d packets lost to the stalls", delivered, total, unheard)
	if unheard == 0 || delivered[0] == 0 || delivered[len(delivered)-1] >= total {
		t.Errorf("the stalls did not fall in the transfer (delivered %v of %d, %d packets lost to them)", delivered, total, unheard)
	}
}

// waitIdle waits until no endpoint has a message left to send or receive.
func waitIdle(t *testing.T, eps []*endpoint, limit time.Duration) {
	t.Helper()
	transporttest.Await(t, limit, "endpoints busy", func() bool {
		for _, e := range eps {
			e.mu.Lock()
			busy := len(e.outgoing) > 0 || len(e.incoming) > 0
			e.mu.Unlock()
			if busy {
				return false
			}
		}
		return true
	})
}

// checkRecords fails t unless each scheduled message has exactly one flow
// record, of its size, between its hosts, sent by NDP.
func checkRecords(t testing.TB, sched []transport.Message, set *transport.Set) {
	t.Helper()
	transporttest.DeliveredOnce(t, transport.ByID(sched), set, transporttest.SentBy("ndp"))
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
	net := lossy(3, 0.02, 0.10)
	sched := []transport.Message{{ID: 7, Src: "a", Dst: "b", Stream: true, DstAddr: transporttest.Peers[1].Addr, Pattern: "permutation"}}
	dl := newDelivery()
	eps, stop := pair(t, net, sched, dl, nil)
	eps[0].start(sched[0])
	time.Sleep(500 * time.Millisecond)
	net.Cut()
	time.Sleep(20 * time.Millisecond) // what is on its way arrives
	eps[1].mu.Lock()
	eps[1].endStreams()
	eps[1].mu.Unlock()
	set := stop()
	dl.Check(t, sched)
	got := dl.Of(7)
	if len(set.Flows) != 1 || set.Flows[0].Bytes != got || got < 256<<10 {
		t.Errorf("stream records %+v, %d bytes delivered in order (want ≥ 256 KB in 0.5 s: the in-memory network's timers are coarse)", set.Flows, got)
	}
	if len(set.Samples) < 3 || set.Samples[len(set.Samples)-1].Bytes <= set.Samples[0].Bytes {
		t.Errorf("samples %+v: want at least 3, growing", set.Samples)
	}
	t.Logf("stream: %d bytes delivered in 0.5 s, %d samples", got, len(set.Samples))
}
