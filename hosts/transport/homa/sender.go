package homa

import (
	"container/heap"
	"context"
	"net/netip"
	"time"

	"github.com/fabric-emu/fabric/hosts/transport"
)

// outMsg is a message this host is sending.
type outMsg struct {
	m         transport.Message
	dst       netip.Addr
	size      int64
	next      int64  // the next new byte to send
	granted   int64  // bytes it may send: RTTbytes at first, then grants
	schedPrio uint8  // the priority of the latest grant
	resend    []span // byte ranges the receiver asked for again
	// lastSent is when all it may send last went, lastHeard when its
	// receiver last spoke of it: silence counts from the later, not from
	// its start, or a message held up behind shorter ones at its own
	// sender is taken for lost the moment its last packet goes.
	lastSent, lastHeard time.Time
	retries             int  // first packets resent since the receiver last spoke
	retried             bool // it has been re-sent unasked: its DONE times nothing (Karn)
	holdsSlot           bool // a re-sent first packet of it awaits an answer (see retrySlots)
	// known: the receiver has spoken of it (GRANT, RESEND or BUSY), so it
	// holds the message and asks for what it lacks itself (§7.1).
	known     bool
	heapIndex int // its place in the endpoint's ready heap, -1 when not in it
}

// span is a byte range [off, end).
type span struct{ off, end int64 }

// pending reports whether the message has a packet it may send now.
func (o *outMsg) pending() bool { return len(o.resend) > 0 || o.next < min(o.granted, o.size) }

// askAgain queues [off, end) for resending, as far as it was sent and is
// not queued already, and reports whether any of it was. A sender behind
// its grants (a starved CPU) gets RESENDs that cover bytes it has not
// sent yet; queuing those too sent each twice.
func (o *outMsg) askAgain(off, end int64) bool {
	end = min(end, o.next, o.size)
	merged := make([]span, 0, len(o.resend)+1)
	added := false
	for _, q := range o.resend { // sorted and disjoint
		if off < end && off < q.off {
			merged = append(merged, span{off, min(end, q.off)})
			added = true
		}
		off = max(off, q.end)
		merged = append(merged, q)
	}
	if off < end {
		merged = append(merged, span{off, end})
		added = true
	}
	o.resend = merged
	return added
}

// remaining is what SRPT ranks senders' messages by (§3.4: a sender sends
// the packet of the message with the fewest bytes left first).
func (o *outMsg) remaining() int64 { return o.size - o.next }

// start queues a scheduled message (the contract's Dispatch calls it at
// the message's time); its first RTTbytes may go at once.
func (e *endpoint) start(m transport.Message) {
	if m.Stream || m.Size <= 0 {
		e.log.Warn("homa carries messages, not streams; skipped", "id", m.ID)
		return
	}
	o := &outMsg{m: m, dst: m.DstAddr, size: m.Size, granted: min(e.args.RTTBytes, m.Size),
		schedPrio: e.prio.Sched(0), heapIndex: -1}
	e.mu.Lock()
	e.outgoing[m.ID] = o
	e.updateReady(o)
	e.spacer.Kick()
	e.mu.Unlock()
	e.timerWake.Signal()
}

// nextPacket picks the packet to send: retransmissions first, then the
// message with the fewest bytes left (SRPT at the sender). It returns the
// packet's destination, priority and bytes, or false when nothing may go.
func (e *endpoint) nextPacket(buf []byte) (netip.Addr, uint8, []byte, bool) {
	if len(e.ready) == 0 {
		return netip.Addr{}, 0, nil, false
	}
	best := e.ready[0]
	off, retrans := best.next, false
	if len(best.resend) > 0 {
		off, retrans = best.resend[0].off, true
	}
	end := min(off+int64(e.mtuPay), best.size)
	if retrans {
		end = min(end, best.resend[0].end)
		if best.resend[0].off = end; best.resend[0].off >= best.resend[0].end {
			best.resend = best.resend[1:]
		}
		e.stats.Retransmitted++
	} else {
		best.next = end
	}
	e.updateReady(best)
	if best.heapIndex < 0 {
		best.lastSent = time.Now() // all it may send has gone: its silence starts
	}
	prio := best.schedPrio
	if off < e.args.RTTBytes {
		prio = e.prio.Unsched(best.size - off)
	}
	h := header{typ: typeData, prio: prio, id: best.m.ID, size: uint32(best.size), offset: uint32(off), length: uint32(end - off)}
	h.put(buf)
	e.stats.DataSent++
	return best.dst, prio, buf[:HeaderLen+int(end-off)], true
}

// pace sends packets until ctx ends (transport.Spacer). With the pacer on
// it keeps to the link rate, handing the NIC a packet just before the one
// on the wire has left, so the host's own queue holds at most one and a
// short message never waits behind a long one there (thesis §6.4,
// Fig. 6.5); off, it sends every packet it may at once.
func (e *endpoint) pace(ctx context.Context) { e.spacer.Run(ctx, &e.mu) }

// dataSource is the sender's side of its spacer (transport.Source).
type dataSource struct{ e *endpoint }

// Next is nextPacket for the spacer, with the packet's time on the link
// (none with the pacer off).
func (s dataSource) Next(buf []byte) (transport.Packet, bool) {
	dst, prio, pkt, ok := s.e.nextPacket(buf)
	if !ok {
		return transport.Packet{}, false
	}
	var gap time.Duration
	if *s.e.args.Pacer {
		gap = s.e.txTime(len(pkt) + 8 + 20 + 14) // + UDP, IP, Ethernet headers
	}
	return transport.Packet{To: dst, Tag: int(prio), Data: pkt, Gap: gap}, true
}

// Pending reports whether a message has a packet it may send now.
func (s dataSource) Pending() bool { return len(s.e.ready) > 0 }

// Send puts a DATA packet on the wire at its priority.
func (s dataSource) Send(p transport.Packet) { s.e.tx(p.To, uint8(p.Tag), p.Data) }

// txTime is how long frameBytes take on the host's link.
func (e *endpoint) txTime(frameBytes int) time.Duration {
	return time.Duration(float64(frameBytes) * 8e9 / float64(max(e.env.LinkRate, 1)))
}

// pacerLead bounds how early the spacer hands the NIC its next packet: its
// wake-ups are late by up to ~100 µs here, and a later hand-over would
// idle the link. Never more than the packet's own time on the link, so the
// NIC holds at most the packet on the wire and the next.
const pacerLead = 200 * time.Microsecond

// onControl handles what a receiver tells this sender.
func (e *endpoint) onControl(src netip.Addr, h header, now time.Time) {
	if h.typ == typeBusy {
		if im := e.incoming[h.id]; im != nil { // from its sender: busy, not lost
			im.lastData = now
			e.stats.Busy++
			return
		}
	}
	o := e.outgoing[h.id]
	if o == nil {
		return // finished (DONE) or unknown
	}
	o.lastHeard, o.retries, o.known = now, 0, true
	if o.holdsSlot {
		o.holdsSlot = false
		e.retrying[o.dst]--
	}
	switch h.typ {
	case typeGrant:
		o.granted = max(o.granted, min(int64(h.offset), o.size))
		o.schedPrio = h.prio
		e.updateReady(o)
		e.spacer.Kick()
	case typeResend:
		// A receiver asks only for bytes it has granted, and the GRANT
		// that told this sender so may have been lost: the RESEND grants
		// them too. Nothing asked for goes out twice from here: what was
		// never sent is still to come in order (and a receiver asking
		// for it hears BUSY, §3.7), and what is already queued for
		// resending is not queued again.
		end := int64(h.offset) + int64(h.length)
		o.granted = max(o.granted, min(end, o.size))
		if !o.askAgain(int64(h.offset), end) || e.shorterPending(o) {
			e.control(src, header{typ: typeBusy, id: h.id})
		}
		e.updateReady(o)
		e.spacer.Kick()
	case typeDone:
		if !o.retried && o.heapIndex < 0 {
			e.doneRTT.Sample(now.Sub(o.lastSent))
		}
		delete(e.outgoing, h.id)
		delete(e.waiting, o)
		if o.heapIndex >= 0 {
			heap.Remove(&e.ready, o.heapIndex)
		}
	}
}

// updateReady keeps o in e.ready exactly while it has a packet it may
// send, in its place by bytes left, and in e.waiting otherwise; call it
// after anything that changes o.pending() or o.remaining().
func (e *endpoint) updateReady(o *outMsg) {
	switch in := o.heapIndex >= 0; {
	case in && o.pending():
		heap.Fix(&e.ready, o.heapIndex)
	case in:
		heap.Remove(&e.ready, o.heapIndex)
		e.waiting[o] = struct{}{}
	case o.pending():
		delete(e.waiting, o)
		heap.Push(&e.ready, o)
	default:
		e.waiting[o] = struct{}{}
	}
}

// readyHeap is a min-heap of outgoing messages by bytes left, then ID
// (SRPT at the sender, §3.4); each message knows its index.
type readyHeap []*outMsg

func (h readyHeap) Len() int { return len(h) }
func (h readyHeap) Less(i, j int) bool {
	a, b := h[i], h[j]
	return a.remaining() < b.remaining() || (a.remaining() == b.remaining() && a.m.ID < b.m.ID)
}
func (h readyHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIndex, h[j].heapIndex = i, j
}
func (h *readyHeap) Push(x any) {
	o := x.(*outMsg)
	o.heapIndex = len(*h)
	*h = append(*h, o)
}
func (h *readyHeap) Pop() any {
	old := *h
	o := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	o.heapIndex = -1
	return o
}

// shorterPending reports whether another message will go before o.
func (e *endpoint) shorterPending(o *outMsg) bool {
	// The heap's top has the fewest bytes left: when it is o, nothing has
	// fewer.
	return len(e.ready) > 0 && e.ready[0] != o && e.ready[0].remaining() < o.remaining()
}

// retrySilent re-sends the first packet of a message whose receiver has
// said nothing for the silence timeout (backed off after each retry)
// since everything it may send went: all of its packets may have been
// lost, and a receiver cannot ask for a message it never saw (§7.1 relies
// on the RPC's response for this; a one-way message has none). Once the
// receiver has spoken of a message it asks for what it lacks itself, and
// the sender re-sends only to recover a lost DONE, at the longest
// backed-off timeout.
//
// The timeout is two resend timeouts or, when longer, what DONEs have
// been taking (SRTT + 4 RTTVAR), and at most retrySlots messages to one
// receiver await an answer to a re-sent packet at a time.
func (e *endpoint) retrySilent(now time.Time) {
	timeout := e.doneRTT.RTO(2 * time.Duration(e.args.ResendAfter))
	for o := range e.waiting {
		wait := backoff(timeout, o.retries)
		if o.known {
			if o.next < o.size {
				continue // waiting for a grant, which its receiver owes it
			}
			wait = backoff(timeout, maxBackoffs)
		}
		if now.Sub(o.lastSent) > wait && now.Sub(o.lastHeard) > wait {
			if !o.holdsSlot {
				if e.retrying[o.dst] >= retrySlots {
					continue
				}
				o.holdsSlot = true
				e.retrying[o.dst]++
			}
			o.askAgain(0, int64(e.mtuPay))
			e.updateReady(o)
			o.lastHeard = now // counts from the retry, however long it waits to go
			o.retries++
			o.retried = true
			e.stats.FirstResends++
			e.spacer.Signal()
		}
	}
}

// retrySlots is how many messages to one receiver may await an answer to
// a re-sent first packet at once. A silent receiver may be slow rather
// than lossy, and then every message to it falls silent together: a retry
// per message would bury a CPU-saturated receiver in re-sent packets
// (docs/homa.md). With slots, retries go as fast as the receiver answers
// them, as TCP's retransmission timer re-sends one segment, not every one
// in flight.
const retrySlots = 4
