package homa

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/fabric-emu/fabric/hosts/transport"
)

// checkQueue compares the queue with a sort of every message in it: the
// first k in order are the active ones, the rest wait, and every message
// knows where it is.
func checkQueue(t *testing.T, q *grantQueue, queued []*inMsg) {
	t.Helper()
	want := slices.Clone(queued)
	slices.SortFunc(want, func(a, b *inMsg) int {
		switch {
		case before(a, b):
			return -1
		case before(b, a):
			return 1
		}
		return 0
	})
	n := min(q.k, len(want))
	if !slices.Equal(q.active, want[:n]) {
		t.Fatalf("active %v, want the first %d of %v", ids(q.active), n, ids(want))
	}
	if len(q.waiting) != len(want)-n {
		t.Fatalf("%d waiting, want %d", len(q.waiting), len(want)-n)
	}
	for i, im := range q.waiting {
		if im.heapIndex != i || im.queued != inWaiting || !slices.Contains(want[n:], im) {
			t.Fatalf("waiting[%d] = message %d (index %d, queued %d)", i, im.id, im.heapIndex, im.queued)
		}
	}
	for _, im := range q.active {
		if im.queued != inActive {
			t.Fatalf("active message %d is marked %d", im.id, im.queued)
		}
	}
}

func ids(ms []*inMsg) []uint64 {
	var out []uint64
	for _, m := range ms {
		out = append(out, m.id)
	}
	return out
}

// The queue keeps the scheduler's order through random arrivals, bytes
// received, grants that complete a message's and messages that finish:
// after every step its active messages are the first k of a full sort.
func TestGrantQueueKeepsSortedOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, k := range []int{1, 2, 4, 7} {
		q := newGrantQueue(k)
		var queued []*inMsg
		next := uint64(1)
		for range 5000 {
			switch op := rng.IntN(10); {
			case op < 3 || len(queued) == 0: // a new message
				im := &inMsg{id: next, size: 1 + rng.Int64N(200000), heapIndex: -1}
				next++
				q.add(im)
				queued = append(queued, im)
			case op < 8: // bytes arrive
				im := queued[rng.IntN(len(queued))]
				if im.bytes < im.size {
					im.bytes += min(1+rng.Int64N(3000), im.size-im.bytes)
					q.moved(im)
				}
			default: // fully granted or complete
				i := rng.IntN(len(queued))
				q.remove(queued[i])
				queued = append(queued[:i], queued[i+1:]...)
			}
			checkQueue(t, &q, queued)
		}
	}
}

// refMsg is a message as the reference scheduler sees it.
type refMsg struct {
	id                   uint64
	size, bytes, granted int64
	prio                 uint8
}

// refGrants is the scheduler written as a sort of every incoming message
// on each packet: the messages with the fewest bytes left, at most k of
// those not fully granted, are granted RTTbytes ahead at the level of
// their rank.
func refGrants(msgs []*refMsg, k int, prio Priorities, rttBytes int64, mtuPay int) []header {
	sorted := slices.Clone(msgs)
	slices.SortFunc(sorted, func(a, b *refMsg) int {
		ra, rb := a.size-a.bytes, b.size-b.bytes
		switch {
		case ra != rb:
			return int(min(max(ra-rb, -1), 1))
		case a.id < b.id:
			return -1
		case a.id > b.id:
			return 1
		}
		return 0
	})
	var out []header
	active := 0
	for _, m := range sorted {
		if m.granted >= m.size {
			continue
		}
		if active == k {
			break
		}
		p := prio.Sched(active)
		target := min(m.size, m.bytes+rttBytes)
		if target >= m.granted+int64(mtuPay) || target == m.size || p != m.prio {
			m.granted, m.prio = max(m.granted, target), p
			out = append(out, header{typ: typeGrant, prio: p, id: m.id, offset: uint32(m.granted)})
		}
		active++
	}
	return out
}

// grantReceiver is a receiver on a 100 Mbit/s link with three
// unscheduled priority levels, so four scheduled ones, recording to w.
func grantReceiver(tb testing.TB, w *transport.Writer) *endpoint {
	tb.Helper()
	env := &transport.Env{MTU: 1500, LinkRate: 100e6, RTT: time.Millisecond}
	args, err := withDefaults(env, Args{})
	if err != nil {
		tb.Fatal(err)
	}
	return newEndpoint(env, args, Priorities{Unscheduled: 3, Cutoffs: []int64{1000, 10000}}, w, nil, slog.New(slog.DiscardHandler))
}

// A receiver sends, packet by packet, the GRANTs of the reference
// scheduler that sorts every incoming message on each DATA packet, over
// thousands of packets of many messages arriving interleaved.
func TestGrantsMatchSortingScheduler(t *testing.T) {
	e := grantReceiver(t, records(t))
	args, prio := e.args, e.prio
	var got []header
	e.tx = func(_ netip.Addr, _ uint8, b []byte) {
		if h, err := parseHeader(b); err == nil && h.typ == typeGrant {
			got = append(got, h)
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	var ref []*refMsg
	sent := map[uint64]int64{} // the next byte each sender sends
	src := netip.MustParseAddr("10.0.0.9")
	for step := range 20000 {
		// A new message now and then; otherwise a packet of a message
		// that may send one (within what it was granted).
		var m *refMsg
		if len(ref) < 3 || rng.IntN(30) == 0 {
			size := int64(1 + rng.IntN(5)*rng.IntN(100000))
			m = &refMsg{id: uint64(step + 1), size: size, granted: min(args.RTTBytes, size)}
			ref = append(ref, m)
		} else {
			var ready []*refMsg
			for _, r := range ref {
				if sent[r.id] < min(r.granted, r.size) {
					ready = append(ready, r)
				}
			}
			if len(ready) == 0 {
				continue
			}
			m = ready[rng.IntN(len(ready))]
		}
		off := sent[m.id]
		n := min(int64(e.mtuPay), m.size-off)
		sent[m.id] = off + n
		m.bytes += n
		got = got[:0]
		e.onData(src, header{typ: typeData, id: m.id, size: uint32(m.size), offset: uint32(off), length: uint32(n)}, time.Now())
		want := refGrants(ref, prio.Scheduled(), prio, args.RTTBytes, e.mtuPay)
		if !slices.Equal(got, want) {
			t.Fatalf("packet %d (message %d, bytes %d of %d): grants %+v, the sorting scheduler's %+v", step, m.id, m.bytes, m.size, got, want)
		}
		if m.bytes >= m.size {
			ref = slices.DeleteFunc(ref, func(r *refMsg) bool { return r == m })
		}
	}
	if e.stats.Grants == 0 {
		t.Fatal("no grant was sent")
	}
	t.Logf("%d grants over 20000 steps", e.stats.Grants)
}

// BenchmarkGrantPerPacket times the receiver's handling of one DATA
// packet, its grant choice included, with n messages being received at
// once, against the scheduler that sorts every incoming message on each
// packet (refGrants): the queue's cost grows with log n, the sort's with
// n log n.
func BenchmarkGrantPerPacket(b *testing.B) {
	r := grantReceiver(b, nil)
	args, prio := r.args, r.prio
	const size = 1 << 30 // never completes in a benchmark's packets
	for _, n := range []int{10, 100, 1000, 10000} {
		b.Run(fmt.Sprintf("queue/%d", n), func(b *testing.B) {
			e := grantReceiver(b, nil) // no message completes: no records
			e.tx = func(netip.Addr, uint8, []byte) {}
			src := netip.MustParseAddr("10.0.0.9")
			offs := make([]int64, n)
			for i := range n {
				e.onData(src, header{typ: typeData, id: uint64(i + 1), size: size, length: uint32(e.mtuPay)}, time.Now())
				offs[i] = int64(e.mtuPay)
			}
			now := time.Now()
			i := 0
			for b.Loop() {
				e.onData(src, header{typ: typeData, id: uint64(i + 1), size: size, offset: uint32(offs[i]), length: uint32(e.mtuPay)}, now)
				offs[i] += int64(e.mtuPay)
				i = (i + 1) % n
			}
		})
		b.Run(fmt.Sprintf("sort/%d", n), func(b *testing.B) {
			ref := make([]*refMsg, n)
			for i := range ref {
				ref[i] = &refMsg{id: uint64(i + 1), size: size, bytes: 1448, granted: args.RTTBytes}
			}
			i := 0
			for b.Loop() {
				ref[i].bytes += 1448
				refGrants(ref, prio.Scheduled(), prio, args.RTTBytes, 1448)
				i = (i + 1) % n
			}
		})
	}
}
