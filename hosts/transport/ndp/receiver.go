package ndp

import (
	"context"
	"math"
	"net/netip"
	"slices"
	"time"

	"github.com/fabric-emu/fabric/hosts/transport"
)

// inMsg is a message this host is receiving.
type inMsg struct {
	id   uint64
	src  netip.Addr
	size int64
	n    uint32 // packets
	prio bool
	have []bool
	got  uint32            // distinct packets held
	cum  uint32            // packets [0, cum) held and delivered, in order
	held map[uint32][]byte // payloads past a gap, waiting for it to fill
	// inflight is how many packets the receiver expects to arrive: the
	// first window and one per PULL sent, less what arrived (whole or
	// trimmed). queued is its PULLs still in the pull queue (a priority
	// message has none: pullQueue).
	inflight, queued int
	pullNo           uint32    // PULLs sent: the counter the last one carried
	last             time.Time // the last arrival or PULL sent
	finished         bool
	stream           bool      // no end: recorded by samples and when the process stops
	delivered        time.Time // when the last byte was delivered
}

// needsPull says whether the packets not yet held outnumber those that
// will come without another PULL. A trimmed header leaves its packet
// missing but no longer coming, so it asks for one more PULL; a whole
// packet is held and no longer coming, so it asks for none. When the
// last packets are on their way the receiver pulls no more (NDP §3.2
// drops a finished sender's PULLs from the queue).
func (im *inMsg) needsPull() bool {
	return int(im.n-im.got) > im.inflight+im.queued
}

// onData takes one DATA packet, whole or trimmed: it ACKs or NACKs it at
// once and queues a PULL if the message still needs one (NDP §3.2).
func (e *endpoint) onData(src netip.Addr, h header, payload []byte, now time.Time) {
	e.stats.DataRecv++
	chopped := h.flags&flagChopped != 0
	if chopped {
		e.stats.Trims++
	}
	if e.done[h.id] {
		e.stats.Dups++
		e.control(src, header{flags: flagAck, id: h.id, seq: h.seq, aux: packets(int64(h.aux), e.pay)})
		return
	}
	im := e.incoming[h.id]
	if im == nil {
		if im = e.newIncoming(src, h); im == nil {
			return
		}
	}
	if h.seq >= im.n {
		return
	}
	for uint32(len(im.have)) <= h.seq { // a stream's grow as it arrives
		im.have = append(im.have, false)
	}
	im.last = now
	im.inflight = max(im.inflight-1, 0)
	switch {
	case im.have[h.seq]:
		e.stats.Dups++
		e.control(src, header{flags: flagAck, id: h.id, seq: h.seq, aux: im.cum})
	case chopped:
		e.stats.Nacks++
		e.control(src, header{flags: flagNack, id: h.id, seq: h.seq, aux: im.cum})
	default:
		e.hold(im, h.seq, payload)
		if im.got == im.n {
			e.control(src, header{flags: flagAck, id: h.id, seq: h.seq, aux: im.cum})
			e.complete(im, now)
			return
		}
		if h.seq < im.cum && e.pullAck(im, now) {
			return
		}
		e.control(src, header{flags: flagAck, id: h.id, seq: h.seq, aux: im.cum})
	}
	e.maybePull(im)
}

// pullAck sends the PULL an in-order packet earns at once, with ACK set,
// when nothing waits in the pull queue and the spacer's slot is (nearly)
// free: its cumulative count ACKs the packet, so one packet does the work
// of two (NDP §3.2, note 4: "If there is only one sender, PULL packets
// don't need extra pacing ... we can send combined PULLACK"). It says
// whether it did.
func (e *endpoint) pullAck(im *inMsg, now time.Time) bool {
	// The arrivals a lone sender's PULLs elicit come one gap apart, give
	// or take the scheduling jitter of both hosts: a PULLACK may go up to
	// half a gap before its slot, which its reservation (from the slot,
	// not from now) makes up, so PULLs still average one per gap.
	if !im.needsPull() || !e.pulls.empty() || e.pullSpacer.Free().After(now.Add(e.gap/2)) {
		return false
	}
	e.pullSpacer.Reserve(now, e.gap)
	im.inflight++
	im.pullNo++
	e.stats.Pulls++
	e.stats.PullAcks++
	h := header{flags: flagPull | flagAck, id: im.id, seq: im.pullNo, aux: im.cum}
	if im.prio {
		h.flags |= flagPrio
	}
	e.control(im.src, h)
	return true
}

// newIncoming is the state of a message whose first packet (whichever
// arrives first) just came.
func (e *endpoint) newIncoming(src netip.Addr, h header) *inMsg {
	stream := h.flags&flagStream != 0
	if h.aux == 0 && !stream {
		return nil
	}
	n := uint32(math.MaxUint32)
	var have []bool
	if !stream {
		n = packets(int64(h.aux), e.pay)
		have = make([]bool, n)
	}
	im := &inMsg{id: h.id, src: src, size: int64(h.aux), n: n, prio: h.flags&flagPrio != 0, stream: stream,
		have: have, held: map[uint32][]byte{}, inflight: int(min(e.iw, n))}
	e.incoming[h.id] = im
	e.timerWake.Signal()
	return im
}

// hold keeps a packet's payload and delivers what is now in order.
func (e *endpoint) hold(im *inMsg, seq uint32, payload []byte) {
	im.have[seq] = true
	im.got++
	if seq != im.cum {
		im.held[seq] = append([]byte(nil), payload...)
		return
	}
	e.give(im, payload)
	for {
		b, ok := im.held[im.cum]
		if !ok {
			return
		}
		delete(im.held, im.cum)
		e.give(im, b)
	}
}

// give delivers packet im.cum to the application.
func (e *endpoint) give(im *inMsg, b []byte) {
	if e.deliver != nil {
		e.deliver(im.id, int64(im.cum)*int64(e.pay), b)
	}
	im.cum++
	im.delivered = time.Now()
}

// maybePull queues a PULL for im when it needs one.
func (e *endpoint) maybePull(im *inMsg) {
	if im.needsPull() {
		e.pulls.push(im)
		e.pullSpacer.Kick()
	}
}

// complete records a message delivered whole.
func (e *endpoint) complete(im *inMsg, now time.Time) {
	im.finished = true
	delete(e.incoming, im.id)
	e.done[im.id] = true
	e.stats.Delivered++
	e.record(im, im.size, now)
}

// record writes the flow record of a message: bytes delivered by end.
func (e *endpoint) record(im *inMsg, bytes int64, end time.Time) {
	m, ok := e.schedule[im.id]
	if !ok {
		m = transport.Message{ID: im.id, Size: im.size}
		if name, found := e.env.PeerName(im.src); found {
			m.Src = name
		}
	}
	e.w.Flow(transport.Flow{ID: im.id, Pattern: m.Pattern, Src: m.Src, Dst: e.env.Host, Size: m.Size, Bytes: bytes,
		DSCP: m.DSCP, CC: "ndp", StartNS: e.env.StartNS + m.TimeNS, EndNS: end.UnixNano(), Class: m.Class, Query: m.Query})
}

// streamBytes is how many bytes of a stream the application has.
func (e *endpoint) streamBytes(im *inMsg) int64 { return int64(im.cum) * int64(e.pay) }

// sampleStreams writes a sample of every stream being received (the
// contract: cumulative bytes every 100 ms).
func (e *endpoint) sampleStreams(now time.Time) {
	for _, im := range e.incoming {
		if im.stream {
			e.w.Sample(transport.Sample{FlowID: im.id, Src: e.schedule[im.id].Src, Dst: e.env.Host, TNS: now.UnixNano(), Bytes: e.streamBytes(im)})
		}
	}
}

// endStreams records every stream received: what arrived by the time the
// process stops, ending when the last of it was delivered.
func (e *endpoint) endStreams() {
	for _, im := range e.incoming {
		if im.stream {
			e.record(im, e.streamBytes(im), im.delivered)
		}
	}
}

// pullSource is the receiver's side of its pull spacer (transport.Source).
type pullSource struct{ e *endpoint }

// Next takes the next PULL from the queue into buf, skipping those a
// finished message or a message whose last packets are on their way no
// longer needs.
func (s pullSource) Next(buf []byte) (transport.Packet, bool) {
	e := s.e
	for {
		im := e.pulls.pop()
		if im == nil {
			return transport.Packet{}, false
		}
		if im.finished || !im.needsPull() {
			continue
		}
		im.inflight++
		im.pullNo++
		im.last = time.Now() // what this PULL elicits is due an RTT from now
		e.stats.Pulls++
		h := header{flags: flagPull, id: im.id, seq: im.pullNo, aux: im.cum}
		if im.prio {
			h.flags |= flagPrio
		}
		h.put(buf)
		return transport.Packet{To: im.src, Data: buf[:HeaderLen], Gap: e.gap}, true
	}
}

// Pending reports whether a PULL is queued.
func (s pullSource) Pending() bool { return !s.e.pulls.empty() }

// Send puts a PULL on the wire through the control socket.
func (s pullSource) Send(p transport.Packet) { s.e.tx(p.To, -1, p.Data) }

// pullLoop is the receiver's pull spacer: one PULL per full-size packet
// time on this host's link, so that the DATA they elicit arrives at the
// link's rate (NDP §3.2).
func (e *endpoint) pullLoop(ctx context.Context) { e.pullSpacer.Run(ctx, &e.mu) }

// repeatStalledPulls repeats the last PULL of every message that has had
// no packet for an RTO: that PULL may have been lost, and the counter
// makes a repeat harmless if it was not. The receiver also forgets what
// it thought was on its way, since it did not come, and pulls again.
func (e *endpoint) repeatStalledPulls(now time.Time) {
	for _, im := range e.incoming {
		// A message whose PULLs wait in the queue is not stalled, only
		// sharing the link: in a 3-to-1 incast of 21 messages, counting
		// from the last arrival alone repeated 85 PULLs and reset the
		// count of what was on its way.
		if im.queued > 0 || now.Sub(im.last) < e.rto {
			continue
		}
		im.last = now
		im.inflight = 0
		if im.pullNo > 0 {
			e.stats.PullRetries++
			e.control(im.src, header{flags: flagPull, id: im.id, seq: im.pullNo, aux: im.cum})
		}
		e.maybePull(im)
	}
}

// pullQueue is a receiver's one pull queue (NDP §3.2), shared by all its
// incoming messages: priority messages first (§5, Fig. 10), the others
// round robin by sender, so that each sender gets an equal share of the
// receiver's link (§3.2: "serviced fairly by default"), in order of
// arrival within a sender.
//
// A priority message does not wait for its arrivals to earn PULLs: it
// keeps the head of the queue, and takes every PULL slot, for as long as
// it has packets neither held nor on their way. Earned PULLs alone keep
// a message's first window in flight, which covers the unloaded round
// trip and no more; behind the long flows' packets in the receiver's
// 8-packet data queue the short flow's round trip was longer, so it got
// only part of the link, and the PULLs it left went to the long flows,
// whose packets kept the queue full. With one PULL per arrival,
// ndp/priority's short flow finished 2.8 RTTs after its idle time; the
// paper's finishes one RTT of long-flow packets later and then "fully
// occupies the receiver's link until it finishes" (§5), which is what
// strict priority does when the receiver "can pull high priority traffic
// more often than low priority traffic" (§3.2, "Congestion Control": fairness).
type pullQueue struct {
	prio  []*inMsg // priority messages that need PULLs, in order of arrival
	bySrc map[netip.Addr][]*inMsg
	ring  []netip.Addr // senders with PULLs queued, in turn
}

func newPullQueue() pullQueue { return pullQueue{bySrc: map[netip.Addr][]*inMsg{}} }

// push queues one PULL for im: for a priority message, its place at the
// head until it needs no more.
func (q *pullQueue) push(im *inMsg) {
	if im.prio {
		if !slices.Contains(q.prio, im) { // a handful at most
			q.prio = append(q.prio, im)
		}
		return
	}
	im.queued++
	s := q.bySrc[im.src]
	if len(s) == 0 {
		q.ring = append(q.ring, im.src)
	}
	q.bySrc[im.src] = append(s, im)
}

func (q *pullQueue) empty() bool { return q.headPrio() == nil && len(q.ring) == 0 }

// headPrio is the first priority message that needs a PULL, after
// dropping those ahead of it that need none any more.
func (q *pullQueue) headPrio() *inMsg {
	for len(q.prio) > 0 {
		if im := q.prio[0]; !im.finished && im.needsPull() {
			return im
		}
		q.prio = q.prio[1:]
	}
	return nil
}

// pop is the message the next PULL is for: the first priority message
// that needs one (it stays at the head), else the next sender's, whose
// queued PULL it takes.
func (q *pullQueue) pop() *inMsg {
	if im := q.headPrio(); im != nil {
		return im
	}
	if len(q.ring) == 0 {
		return nil
	}
	src := q.ring[0]
	q.ring = q.ring[1:]
	s := q.bySrc[src]
	im := s[0]
	im.queued--
	if len(s) > 1 {
		q.bySrc[src] = s[1:]
		q.ring = append(q.ring, src)
	} else {
		delete(q.bySrc, src)
	}
	return im
}
