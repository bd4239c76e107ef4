package homa

import (
	"context"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/fabric-emu/fabric/hosts/transport"
	"github.com/fabric-emu/fabric/hosts/transport/transporttest"
)

// pair starts two endpoints on a network, each with its own records file,
// and returns them with a function that stops both and returns their
// records.
func pair(t *testing.T, net *transporttest.Network, sched []transport.Message) ([2]*endpoint, func() *transport.Set) {
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
		e.tx = func(dst netip.Addr, _ uint8, b []byte) { net.Send(env.Addr, dst, b) }
		net.Attach(env.Addr, e.handle)
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
	net := transporttest.NewNetwork(1)
	net.Loss, net.MaxDelay = 0.03, 300*time.Microsecond
	sizes := []int64{1, 2, 100, 1447, 1448, 1449, 3000, 9999, 12500, 12501, 50000, 100000, 1 << 20, 4 << 20}
	sched := transporttest.BothWays(sizes)
	eps, stop := pair(t, net, sched)
	for _, m := range sched {
		eps[map[string]int{"a": 0, "b": 1}[m.Src]].start(m)
	}
	// Everything arrives when no endpoint has a message left to send.
	transporttest.Await(t, 60*time.Second, "messages left to send", func() bool {
		for _, e := range eps {
			e.mu.Lock()
			busy := len(e.outgoing) > 0
			e.mu.Unlock()
			if busy {
				return false
			}
		}
		return true
	})
	transporttest.DeliveredOnce(t, transport.ByID(sched), stop(), nil)
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
	dropped := net.Counts().Dropped
	t.Logf("dropped %d packets; %d RESENDs, %d packets retransmitted, %d duplicates dropped", dropped, st.Resends, st.Retransmitted, st.Dups)
	if dropped == 0 || st.Resends == 0 || st.Retransmitted == 0 {
		t.Errorf("the network dropped %d packets and %d were resent: recovery was not exercised", dropped, st.Retransmitted)
	}
}

// handPicked is a sender on a 100 Mbit/s link that stays busy, so that
// starts, grants and RESENDs leave every DATA packet to the pacer's loop,
// whose picks the test makes by hand (nextPacket).
func handPicked(t *testing.T) (*endpoint, Args) {
	t.Helper()
	env := &transport.Env{MTU: 1500, LinkRate: 100e6, RTT: time.Millisecond}
	args, err := withDefaults(env, Args{})
	if err != nil {
		t.Fatal(err)
	}
	e := newEndpoint(env, args, Priorities{Unscheduled: 1}, nil, nil, slog.New(slog.DiscardHandler))
	e.spacer.Reserve(time.Now(), time.Hour)
	return e, args
}

// A sender sends the packet of the message with the fewest bytes left
// first (SRPT, §3.4), whatever order messages started and were granted
// in; a message leaves the ready heap when it has nothing it may send and
// returns when a grant or RESEND gives it some.
func TestSenderPicksFewestBytesLeft(t *testing.T) {
	e, args := handPicked(t)
	e.tx = func(netip.Addr, uint8, []byte) { t.Fatal("a packet was sent at once while the link was busy") }
	pay := int64(e.mtuPay)
	sizes := map[uint64]int64{1: 40 * pay, 2: 3 * pay, 3: 10 * pay, 4: 2*pay + 1}
	for _, id := range []uint64{1, 2, 3, 4} {
		e.start(transport.Message{ID: id, Size: sizes[id]})
	}
	buf := make([]byte, HeaderLen+e.mtuPay)
	var order []uint64
	for {
		_, _, pkt, ok := e.nextPacket(buf)
		if !ok {
			break
		}
		h, err := parseHeader(pkt)
		if err != nil {
			t.Fatal(err)
		}
		order = append(order, h.id)
	}
	// Unscheduled bytes only (RTTbytes): each message's share, fewest
	// bytes left first; ties never arise here.
	var want []uint64
	left := map[uint64]int64{}
	for id, size := range sizes {
		left[id] = size
	}
	sent := map[uint64]int64{}
	for {
		best := uint64(0)
		for id, size := range sizes {
			if sent[id] < min(args.RTTBytes, size) && (best == 0 || left[id] < left[best] || (left[id] == left[best] && id < best)) {
				best = id
			}
		}
		if best == 0 {
			break
		}
		n := min(pay, sizes[best]-sent[best])
		sent[best] += n
		left[best] -= n
		want = append(want, best)
	}
	if !slices.Equal(order, want) {
		t.Fatalf("packets went in message order %v, want %v (RTTbytes %d, payload %d)", order, want, args.RTTBytes, pay)
	}
	if len(e.ready) != 0 || len(e.waiting) != len(sizes) {
		t.Fatalf("after everything allowed was sent %d messages are ready and %d waiting, want 0 and %d", len(e.ready), len(e.waiting), len(sizes))
	}
	// A grant to the longest message makes it ready again.
	e.onControl(netip.Addr{}, header{typ: typeGrant, id: 1, offset: uint32(sizes[1]), prio: 0}, time.Now())
	if _, _, pkt, ok := e.nextPacket(buf); !ok || pkt[0] != typeData {
		t.Fatalf("after a grant message 1 sent nothing")
	} else if h, _ := parseHeader(pkt); h.id != 1 {
		t.Fatalf("after a grant to message 1 the packet was message %d's", h.id)
	}
	e.onControl(netip.Addr{}, header{typ: typeDone, id: 1}, time.Now())
	if _, _, _, ok := e.nextPacket(buf); ok || len(e.ready) != 0 || len(e.waiting) != len(sizes)-1 {
		t.Fatalf("after DONE message 1 still sends (ready %d, waiting %d)", len(e.ready), len(e.waiting))
	}
	// A message silent for longer than the retry timeout sends its first
	// packet again; those whose receivers spoke since do not.
	later := time.Now().Add(3 * time.Duration(args.ResendAfter))
	for o := range e.waiting {
		if o.m.ID != 3 {
			o.lastHeard = later
		}
	}
	e.retrySilent(later)
	if _, _, pkt, ok := e.nextPacket(buf); !ok {
		t.Fatalf("a silent message's first packet was not sent again")
	} else if h, _ := parseHeader(pkt); h.id != 3 || h.offset != 0 {
		t.Fatalf("the retry sent message %d at %d, want message 3 at 0", h.id, h.offset)
	}
	if _, _, _, ok := e.nextPacket(buf); ok || e.stats.FirstResends != 1 {
		t.Fatalf("the retry sent more than one packet (first resends %d)", e.stats.FirstResends)
	}
	// A RESEND makes a message that had sent everything ready again, for
	// the range asked for only.
	e.onControl(netip.Addr{}, header{typ: typeResend, id: 2, offset: uint32(pay), length: uint32(pay)}, time.Now())
	if _, _, pkt, ok := e.nextPacket(buf); !ok {
		t.Fatalf("after a RESEND message 2 sent nothing")
	} else if h, _ := parseHeader(pkt); h.id != 2 || int64(h.offset) != pay {
		t.Fatalf("after a RESEND of message 2 at %d the packet was message %d's at %d", pay, h.id, h.offset)
	}
	if _, _, _, ok := e.nextPacket(buf); ok || len(e.ready) != 0 {
		t.Fatalf("after the resent packet something still sends (ready %d)", len(e.ready))
	}
}

// A RESEND makes the sender send again only what it had sent and has not
// queued for resending already: bytes it never sent are still to come in
// order, so it answers BUSY for them instead of sending them twice, and a
// receiver asking twice for the same bytes gets them once.
func TestResendSendsEachByteOnce(t *testing.T) {
	e, args := handPicked(t)
	var controls []uint8
	e.tx = func(_ netip.Addr, _ uint8, b []byte) {
		if b[0] == typeData {
			t.Fatal("a DATA packet was sent outside the pacer's loop")
		}
		controls = append(controls, b[0])
	}
	pay := int64(e.mtuPay)
	if args.RTTBytes < 3*pay {
		t.Fatalf("RTTbytes %d: the test needs three unscheduled packets", args.RTTBytes)
	}
	e.start(transport.Message{ID: 1, Size: 3 * pay})
	buf := make([]byte, HeaderLen+e.mtuPay)
	send := func() (int64, bool) {
		t.Helper()
		_, _, pkt, ok := e.nextPacket(buf)
		if !ok {
			return 0, false
		}
		h, err := parseHeader(pkt)
		if err != nil {
			t.Fatal(err)
		}
		return int64(h.offset), true
	}
	if off, ok := send(); !ok || off != 0 {
		t.Fatalf("first packet at %d (sent %v), want 0", off, ok)
	}
	resend := func(off, end int64) {
		e.onControl(netip.Addr{}, header{typ: typeResend, id: 1, offset: uint32(off), length: uint32(end - off)}, time.Now())
	}
	// Never sent: BUSY, and the next packet is the next new one.
	resend(2*pay, 3*pay)
	if !slices.Equal(controls, []uint8{typeBusy}) {
		t.Fatalf("a RESEND for bytes never sent got %v, want one BUSY", controls)
	}
	if off, ok := send(); !ok || off != pay || e.stats.Retransmitted != 0 {
		t.Fatalf("after it the packet was at %d (sent %v, retransmitted %d), want the new one at %d", off, ok, e.stats.Retransmitted, pay)
	}
	// Everything asked for, twice: the two sent packets once each, then
	// the new one, then nothing.
	resend(0, 3*pay)
	resend(0, 3*pay)
	var offs []int64
	for {
		off, ok := send()
		if !ok {
			break
		}
		offs = append(offs, off)
	}
	if want := []int64{0, pay, 2 * pay}; !slices.Equal(offs, want) || e.stats.Retransmitted != 2 {
		t.Fatalf("after two RESENDs of the whole message the packets went at %v (retransmitted %d), want %v (2)", offs, e.stats.Retransmitted, want)
	}
	if !slices.Equal(controls, []uint8{typeBusy, typeBusy}) {
		t.Fatalf("controls %v, want BUSY for the first RESEND and for the repeat that added nothing", controls)
	}
	// A RESEND beyond what the sender knows it may send (the GRANT was
	// lost) grants the bytes it asks for: they go once, as new data.
	e.start(transport.Message{ID: 2, Size: args.RTTBytes + 3*pay})
	for {
		if _, ok := send(); !ok {
			break
		}
	}
	g := e.outgoing[2].next
	e.onControl(netip.Addr{}, header{typ: typeResend, id: 2, offset: uint32(g), length: uint32(pay)}, time.Now())
	before := e.stats.Retransmitted
	if off, ok := send(); !ok || off != g || e.stats.Retransmitted != before {
		t.Fatalf("after a RESEND of ungranted bytes at %d the packet was at %d (sent %v, retransmitted %d more)", g, off, ok, e.stats.Retransmitted-before)
	}
	if off, ok := send(); ok {
		t.Fatalf("a packet at %d went beyond what the RESEND asked for", off)
	}
}

// A sender re-sends first packets of silent messages to one receiver for
// at most retrySlots of them at a time, and another only when one of
// those is answered; a message its receiver has spoken of is not re-sent
// while it waits for a grant, and, once all of it has gone, only after
// the longest backed-off timeout (its DONE may be lost).
func TestSilentRetriesAreBounded(t *testing.T) {
	e, args := handPicked(t)
	pay := int64(e.mtuPay)
	buf := make([]byte, HeaderLen+e.mtuPay)
	sendAll := func() (ids []uint64) {
		t.Helper()
		for {
			_, _, pkt, ok := e.nextPacket(buf)
			if !ok {
				return ids
			}
			h, err := parseHeader(pkt)
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, h.id)
		}
	}
	const silent = retrySlots + 3
	for id := range uint64(silent) {
		e.start(transport.Message{ID: id + 1, Size: pay})
	}
	// Message 100 needs grants, 101 fits in RTTbytes: both are heard of.
	e.start(transport.Message{ID: 100, Size: args.RTTBytes + 5*pay})
	e.start(transport.Message{ID: 101, Size: pay})
	if got := len(sendAll()); got != silent+2+int(args.RTTBytes/pay) {
		t.Fatalf("sent %d packets before any retry", got)
	}
	now := time.Now()
	e.onControl(netip.Addr{}, header{typ: typeBusy, id: 100}, now)
	e.onControl(netip.Addr{}, header{typ: typeBusy, id: 101}, now)
	timeout := 2 * time.Duration(args.ResendAfter)

	later := now.Add(timeout + time.Millisecond)
	e.retrySilent(later)
	probed := sendAll()
	if len(probed) != retrySlots || slices.Contains(probed, 100) || slices.Contains(probed, 101) {
		t.Fatalf("after one timeout the retries were for %v: want %d of the %d never-heard messages", probed, retrySlots, silent)
	}
	// Nothing more until one is answered; then one more, not a retry of
	// the others (their timeout doubled).
	e.retrySilent(later.Add(time.Millisecond))
	if again := sendAll(); len(again) != 0 {
		t.Fatalf("with every slot taken, %v were re-sent", again)
	}
	e.onControl(netip.Addr{}, header{typ: typeDone, id: probed[0]}, later)
	e.retrySilent(later.Add(timeout + time.Millisecond))
	next := sendAll()
	if len(next) != 1 || slices.Contains(probed, next[0]) {
		t.Fatalf("after one answer the retries were %v, want one message not retried before (retried: %v)", next, probed)
	}
	// The heard-of messages, alone now: 100 waits for its grant however
	// long; 101, all sent, is retried after the longest backed-off
	// timeout only.
	for id := range uint64(silent) {
		e.onControl(netip.Addr{}, header{typ: typeDone, id: id + 1}, later)
	}
	// Those DONEs of messages never re-sent were timed: the timeout is
	// now what they took, if longer.
	timeout = e.doneRTT.RTO(timeout)
	e.retrySilent(now.Add(backoff(timeout, maxBackoffs) - time.Millisecond))
	if got := sendAll(); len(got) != 0 {
		t.Fatalf("heard-of messages were re-sent early: %v", got)
	}
	e.retrySilent(now.Add(backoff(timeout, maxBackoffs) + time.Millisecond))
	if got := sendAll(); !slices.Contains(got, 101) || slices.Contains(got, 100) {
		t.Fatalf("after the longest timeout the retries were %v, want 101's and never 100's", got)
	}
}

// A receiver answers a re-sent first packet of a message it holds but has
// not finished with BUSY, of one it finished with DONE, and other
// duplicates with nothing.
func TestReceiverAnswersRetries(t *testing.T) {
	e, args := handPicked(t)
	var controls []uint8
	e.tx = func(_ netip.Addr, _ uint8, b []byte) { controls = append(controls, b[0]) }
	e.w = records(t)
	pay := uint32(e.mtuPay)
	size := uint32(args.RTTBytes) + 3*pay
	data := func(id uint64, off, n uint32) {
		e.onData(netip.Addr{}, header{typ: typeData, id: id, size: size, offset: off, length: n}, time.Now())
	}
	data(1, 0, pay)
	data(1, pay, pay)
	controls = nil
	data(1, 0, pay)
	data(1, pay, pay)
	if !slices.Equal(controls, []uint8{typeBusy}) {
		t.Fatalf("two duplicates of an unfinished message (at 0, then later) got %v, want one BUSY", controls)
	}
	small := uint32(10)
	e.onData(netip.Addr{}, header{typ: typeData, id: 2, size: small, offset: 0, length: small}, time.Now())
	controls = nil
	e.onData(netip.Addr{}, header{typ: typeData, id: 2, size: small, offset: 0, length: small}, time.Now())
	if !slices.Equal(controls, []uint8{typeDone}) {
		t.Fatalf("a duplicate of a finished message got %v, want DONE", controls)
	}
}

// A receiver whose grants are answered slowly waits longer before it asks
// again: its resend timeout follows the time from a GRANT to the packet
// that ends what the GRANT allowed.
func TestResendTimeoutFollowsGrantAnswers(t *testing.T) {
	e, args := handPicked(t)
	var resends int
	e.tx = func(_ netip.Addr, _ uint8, b []byte) {
		if b[0] == typeResend {
			resends++
		}
	}
	e.w = records(t)
	pay := uint32(e.mtuPay)
	size := uint32(args.RTTBytes) + 20*pay
	start := time.Now()
	// The first packet brings a GRANT; the packet ending what it allowed
	// comes 50 resend timeouts later.
	e.onData(netip.Addr{}, header{typ: typeData, id: 1, size: size, offset: 0, length: pay}, start)
	im := e.incoming[1]
	if im == nil || im.grantAt.IsZero() {
		t.Fatal("the first packet of a long message brought no GRANT")
	}
	slow := 50 * time.Duration(args.ResendAfter)
	end := uint32(im.granted)
	arrived := im.grantAt.Add(slow)
	e.onData(netip.Addr{}, header{typ: typeData, id: 1, size: size, offset: end - pay, length: pay}, arrived)
	if rto := e.grantRTT.RTO(0); rto < slow {
		t.Fatalf("after a grant answered in %v the resend timeout is %v", slow, rto)
	}
	e.resendStalled(arrived.Add(2 * time.Duration(args.ResendAfter)))
	if resends != 0 {
		t.Fatalf("asked again %d times after 2 fixed timeouts, though grants take %v", resends, slow)
	}
	e.resendStalled(arrived.Add(e.grantRTT.RTO(0) + time.Millisecond))
	if resends != 1 {
		t.Fatalf("asked again %d times after the measured timeout, want 1", resends)
	}
}

// records is a records file in the test's directory, for a receiver that
// completes messages.
func records(t *testing.T) *transport.Writer {
	t.Helper()
	w, err := transport.OpenRecords(filepath.Join(t.TempDir(), "records.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}
