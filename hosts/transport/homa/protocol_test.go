package homa

import (
	"context"
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

// network joins endpoints in memory: every packet may be lost, and each
// is delivered after its own random delay, so packets overtake each other.
type network struct {
	mu        sync.Mutex
	rng       *rand.Rand
	loss      float64
	maxDelay  time.Duration
	endpoints map[netip.Addr]*endpoint
	dropped   int
	prios     map[uint8]int // DATA packets sent at each priority
}

func (n *network) transmit(from netip.Addr) func(netip.Addr, uint8, []byte) {
	return func(dst netip.Addr, p uint8, b []byte) {
		n.mu.Lock()
		if b[0] == typeData {
			n.prios[p]++
		}
		lost := n.rng.Float64() < n.loss
		delay := time.Duration(n.rng.Int64N(int64(n.maxDelay)))
		if lost {
			n.dropped++
		}
		to := n.endpoints[dst]
		n.mu.Unlock()
		if lost || to == nil {
			return
		}
		pkt := append([]byte(nil), b...)
		time.AfterFunc(delay, func() { to.handle(from, pkt) })
	}
}

// pair starts two endpoints on a lossy, reordering network, each with its
// own records file, and returns them with a function that stops both and
// returns their records.
func pair(t *testing.T, net *network, sched []transport.Message) ([2]*endpoint, func() *transport.Set) {
	t.Helper()
	var eps [2]*endpoint
	n := 0
	stop := transporttest.Pair(t, 100e6, func(env *transport.Env, w *transport.Writer, goes func(func(context.Context))) {
		args, err := withDefaults(env, Args{ResendAfter: transport.Duration(5 * time.Millisecond)})
		if err != nil {
			t.Fatal(err)
		}
		prio := prioritiesOfSizes(sizesOf(sched), args.RTTBytes, payloadSize(env.MTU), 0)
		e := newEndpoint(env, args, prio, w, sched, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
		e.tx = net.transmit(env.Addr)
		net.endpoints[env.Addr] = e
		eps[n] = e
		n++
		goes(e.timers)
		goes(e.pace)
	})
	return eps, stop
}

func sizesOf(msgs []transport.Message) []int64 {
	var out []int64
	for _, m := range msgs {
		out = append(out, m.Size)
	}
	return out
}

// Messages of every size from 1 byte to 4 MB, both ways at once, cross a
// network that loses 3 % of packets and reorders them; each is delivered
// exactly once and whole, the receivers never grant to more messages at
// once than the degree of overcommitment, and lost packets were recovered
// by RESEND.
func TestDeliveredOnceUnderLossAndReordering(t *testing.T) {
	net := &network{rng: rand.New(rand.NewPCG(1, 2)), loss: 0.03, maxDelay: 300 * time.Microsecond,
		endpoints: map[netip.Addr]*endpoint{}, prios: map[uint8]int{}}
	sizes := []int64{1, 2, 100, 1447, 1448, 1449, 3000, 9999, 12500, 12501, 50000, 100000, 1 << 20, 4 << 20}
	var sched []transport.Message
	for i, x := range sizes {
		for dir := range 2 {
			src, dst := "a", "b"
			if dir == 1 {
				src, dst = dst, src
			}
			sched = append(sched, transport.Message{ID: uint64(2*i + dir + 1), Src: src, Dst: dst, Size: x,
				DstAddr: netip.MustParseAddr(map[string]string{"a": "10.0.0.1", "b": "10.0.0.2"}[dst])})
		}
	}
	eps, stop := pair(t, net, sched)
	for _, m := range sched {
		eps[map[string]int{"a": 0, "b": 1}[m.Src]].start(m)
	}
	// Everything arrives when no endpoint has a message left to send.
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		busy := false
		for _, e := range eps {
			e.mu.Lock()
			busy = busy || len(e.outgoing) > 0
			e.mu.Unlock()
		}
		if !busy {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	set := stop()
	got := map[uint64]int{}
	for _, f := range set.Flows {
		got[f.ID]++
		var want transport.Message
		for _, m := range sched {
			if m.ID == f.ID {
				want = m
			}
		}
		if f.Bytes != want.Size || f.Src != want.Src || f.Dst != want.Dst {
			t.Errorf("record %+v for message %+v", f, want)
		}
	}
	for _, m := range sched {
		if got[m.ID] != 1 {
			t.Errorf("message %d (%d B, %s→%s) recorded %d times", m.ID, m.Size, m.Src, m.Dst, got[m.ID])
		}
	}
	var st Stats
	for _, e := range eps {
		e.mu.Lock()
		if e.stats.MaxActive > e.prio.Scheduled() {
			t.Errorf("%s granted to %d messages at once, more than the degree %d", e.env.Host, e.stats.MaxActive, e.prio.Scheduled())
		}
		st.Resends += e.stats.Resends
		st.Retransmitted += e.stats.Retransmitted
		st.Dups += e.stats.Dups
		e.mu.Unlock()
	}
	t.Logf("dropped %d packets; %d RESENDs, %d packets retransmitted, %d duplicates dropped", net.dropped, st.Resends, st.Retransmitted, st.Dups)
	if net.dropped == 0 || st.Resends == 0 || st.Retransmitted == 0 {
		t.Errorf("the network dropped %d packets and %d were resent: recovery was not exercised", net.dropped, st.Retransmitted)
	}
}
