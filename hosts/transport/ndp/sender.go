package ndp

import (
	"context"
	"math"
	"net/netip"
	"slices"
	"time"

	"github.com/fabric-emu/fabric/hosts/transport"
)

// The state of one packet at its sender.
const (
	pktUnsent   = iota
	pktInFlight // sent, neither ACKed nor NACKed nor timed out
	pktQueued   // NACKed or timed out: waiting in rtx to be sent again
	pktAcked
)

// outMsg is a message this host is sending.
type outMsg struct {
	m      transport.Message
	dst    netip.Addr
	size   int64
	n      uint32 // packets
	prio   bool
	state  []uint8 // of every packet sent so far (appended as new ones go)
	sentAt []time.Time
	resent []bool   // sent more than once: its ACK does not time a round trip (Karn)
	next   uint32   // the first packet never sent
	low    uint32   // every packet before low is ACKed
	acked  uint32   // packets ACKed
	rtx    []uint32 // packets to send again, first in first out
	credit int64    // packets it may send: the initial window, then one per PULL
	pulls  uint32   // the highest PULL counter heard
}

// start queues a scheduled message (the contract's Dispatch calls it at
// the message's time): its first window may go at once. A stream has no
// end: it is sent as fast as it is pulled until the process stops.
func (e *endpoint) start(m transport.Message) {
	if (!m.Stream && m.Size <= 0) || m.Size > math.MaxUint32 {
		e.log.Warn("ndp carries messages of 1 B to 4 GB and streams; skipped", "id", m.ID, "size", m.Size)
		return
	}
	n := uint32(math.MaxUint32)
	if !m.Stream {
		n = packets(m.Size, e.pay)
	}
	o := &outMsg{m: m, dst: m.DstAddr, size: m.Size, n: n, prio: e.priority(m), credit: int64(min(e.iw, n))}
	if !m.Stream {
		o.state, o.sentAt, o.resent = make([]uint8, 0, n), make([]time.Time, 0, n), make([]bool, 0, n)
	}
	e.mu.Lock()
	e.outgoing[m.ID] = o
	e.order = append(e.order, o)
	e.mu.Unlock()
	e.sendSpacer.Signal()
	e.timerWake.Signal()
}

// priority says whether a message's PULLs jump the receiver's pull queue
// (NDP §5, Fig. 10: the receiver pulls a preferred sender first).
func (e *endpoint) priority(m transport.Message) bool {
	return (e.args.PrioClass != "" && m.Class == e.args.PrioClass) ||
		(e.args.PrioBelow > 0 && m.Size < int64(e.args.PrioBelow))
}

// sendable reports whether o has a packet it may send now, dropping
// retransmissions that an ACK has made needless.
func (o *outMsg) sendable() bool {
	for len(o.rtx) > 0 && o.state[o.rtx[0]] != pktQueued {
		o.rtx = o.rtx[1:]
	}
	return o.credit > 0 && (len(o.rtx) > 0 || o.next < o.n)
}

// pick is the message whose packet goes next: priority messages first,
// then the others in turn (round robin, so that a sender's messages share
// its link).
func (e *endpoint) pick() *outMsg {
	for _, prioOnly := range []bool{true, false} {
		for i := range e.order {
			o := e.order[(e.rr+i)%len(e.order)]
			if (o.prio || !prioOnly) && o.sendable() {
				e.rr = (e.rr + i + 1) % len(e.order)
				return o
			}
		}
	}
	return nil
}

// dataSource is the sender's side of its DATA spacer (transport.Source).
type dataSource struct{ e *endpoint }

// Next builds the next DATA packet in buf: a retransmission first (NDP
// §3.2: "any packets queued for retransmission are sent first, followed by
// new data"), then new data; false when no message may send.
func (s dataSource) Next(buf []byte) (transport.Packet, bool) {
	e := s.e
	o := e.pick()
	if o == nil {
		return transport.Packet{}, false
	}
	var seq uint32
	if len(o.rtx) > 0 {
		seq, o.rtx = o.rtx[0], o.rtx[1:]
		o.resent[seq] = true
		e.stats.Retransmitted++
	} else {
		seq = o.next
		o.next++
		o.state, o.sentAt, o.resent = append(o.state, 0), append(o.sentAt, time.Time{}), append(o.resent, false)
	}
	o.credit--
	o.state[seq], o.sentAt[seq] = pktInFlight, time.Now()
	off := int64(seq) * int64(e.pay)
	length := int64(e.pay)
	h := header{flags: flagData, id: o.m.ID, seq: seq}
	switch {
	case o.m.Stream:
		h.flags |= flagStream
	default:
		length = min(length, o.size-off)
		h.aux = uint32(o.size)
		if seq == o.n-1 {
			h.flags |= flagLast
		}
	}
	h.length = uint16(length)
	if o.prio {
		h.flags |= flagPrio
	}
	h.put(buf)
	fill(buf[HeaderLen:HeaderLen+length], o.m.ID, off)
	e.stats.DataSent++
	e.spray++
	pkt := buf[:HeaderLen+length]
	return transport.Packet{To: o.dst, Tag: e.spray % e.args.Paths, Data: pkt, Gap: frameTime(e.env, 20+8+len(pkt))}, true
}

// Pending reports whether a message may send a packet now.
func (s dataSource) Pending() bool { return slices.ContainsFunc(s.e.order, (*outMsg).sendable) }

// Send puts a DATA packet on the wire through its path's source port.
func (s dataSource) Send(p transport.Packet) { s.e.tx(p.To, p.Tag, p.Data) }

// sendLoop is the sender's spacer: it hands the host's link one DATA
// packet per packet time, so that a packet's send time is close to the
// time it leaves (the RTO counts from it) and a first window does not
// queue in the host.
func (e *endpoint) sendLoop(ctx context.Context) { e.sendSpacer.Run(ctx, &e.mu) }

// onPull gives a message one more packet per step of the PULL counter
// (NDP §3.2: a PULL that overtook a lost or delayed one pulls for both).
func (e *endpoint) onPull(h header) {
	e.stats.PullsRecv++
	o := e.outgoing[h.id]
	if o == nil {
		return // delivered whole, or never ours
	}
	e.ackBelow(o, h.aux)
	if o = e.outgoing[h.id]; o != nil && h.seq > o.pulls {
		o.credit += int64(h.seq - o.pulls)
		o.pulls = h.seq
		e.sendSpacer.Kick()
	}
}

// onAck takes an ACK or a NACK of one packet (and the cumulative ACK
// both carry).
func (e *endpoint) onAck(h header, now time.Time) {
	o := e.outgoing[h.id]
	if o == nil || h.seq >= o.next {
		return // retired, or a packet never sent
	}
	if h.flags&flagNack != 0 {
		e.stats.NacksRecv++
		// A NACK sooner than half an unloaded RTT after the packet
		// was last sent is for an earlier copy (a timeout resent it
		// meanwhile): acting on it would send a third copy.
		if o.state[h.seq] == pktInFlight && now.Sub(o.sentAt[h.seq]) < e.env.RTT/2 {
			e.stats.StaleNacks++
		} else if o.state[h.seq] == pktInFlight {
			o.state[h.seq] = pktQueued
			o.rtx = append(o.rtx, h.seq)
			e.sendSpacer.Kick()
		}
	} else {
		if o.state[h.seq] == pktInFlight && !o.resent[h.seq] {
			e.rtt.Sample(now.Sub(o.sentAt[h.seq]))
		}
		e.ackOne(o, h.seq)
	}
	e.ackBelow(o, h.aux)
}

func (e *endpoint) ackOne(o *outMsg, seq uint32) {
	if o.state[seq] != pktAcked {
		o.state[seq] = pktAcked
		o.acked++
	}
}

// ackBelow ACKs every packet before cum and retires the message when all
// of its packets are ACKed.
func (e *endpoint) ackBelow(o *outMsg, cum uint32) {
	for ; o.low < min(cum, o.next); o.low++ {
		e.ackOne(o, o.low)
	}
	for o.low < o.next && o.state[o.low] == pktAcked {
		o.low++
	}
	if o.acked == o.n {
		delete(e.outgoing, o.m.ID)
		i := slices.Index(e.order, o)
		e.order = slices.Delete(e.order, i, i+1)
		if e.rr > i {
			e.rr--
		}
	}
}

// retransmitTimedOut queues again every packet sent more than an RTO ago
// and neither ACKed nor NACKed: it, or its trimmed header, or the NACK,
// was lost. The first of them may go without a PULL (the receiver may be
// waiting for it before it pulls again), the others wait for PULLs: when
// an incast overflows the header queue, a message loses many packets at
// once, and pushing them all again would overflow it again.
func (e *endpoint) retransmitTimedOut(now time.Time) {
	rto := e.rtt.RTO(e.rto)
	for _, o := range e.order {
		timedOut := false
		for s := o.low; s < o.next; s++ {
			if o.state[s] == pktInFlight && now.Sub(o.sentAt[s]) > rto {
				o.state[s] = pktQueued
				o.rtx = append(o.rtx, s)
				e.stats.RTOs++
				timedOut = true
			}
		}
		if timedOut {
			o.credit = max(o.credit, 1)
			e.sendSpacer.Signal()
		}
	}
}

// pattern is the bytes messages carry: byte x of message id is
// pattern[(id+x)%251], so a receiver can check what it got came from the
// right place of the right message.
var pattern = func() []byte {
	b := make([]byte, 251+65536)
	for i := range b {
		b[i] = byte(i % 251)
	}
	return b
}()

func fill(b []byte, id uint64, off int64) {
	copy(b, pattern[(id+uint64(off))%251:])
}
