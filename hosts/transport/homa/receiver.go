package homa

import (
	"net/netip"
	"time"

	"github.com/fabric-emu/fabric/hosts/transport"
)

// inMsg is a message this host is receiving.
type inMsg struct {
	id       uint64
	src      netip.Addr
	size     int64
	got      map[uint32]uint32 // offset → length of each distinct packet received
	bytes    int64             // distinct bytes received
	granted  int64             // bytes the sender may send (RTTbytes, then grants)
	prio     uint8             // the priority of the latest grant
	lastData time.Time
	asked    int // RESENDs since the last new data: each doubles the next wait
	// grantAt is when the latest GRANT went, until the packet that ends
	// what it allowed arrives: the time between them is how long this
	// receiver's grants take to be answered.
	grantAt time.Time
	resent  bool // it has been asked for again: its answers time nothing (Karn)
	// Its place in the endpoint's grant queue (grantQueue).
	queued    int
	heapIndex int
}

// remaining is what the grant scheduler ranks messages by (SRPT).
func (im *inMsg) remaining() int64 { return im.size - im.bytes }

// onData takes one DATA packet: a new byte range of a message, a
// duplicate, or the last piece, which completes the message.
func (e *endpoint) onData(src netip.Addr, h header, now time.Time) {
	e.stats.DataRecv++
	if e.done[h.id] {
		e.stats.Dups++
		e.control(src, header{typ: typeDone, id: h.id}) // the first DONE may have been lost
		return
	}
	im := e.incoming[h.id]
	if im == nil {
		im = &inMsg{id: h.id, src: src, size: int64(h.size), got: map[uint32]uint32{},
			granted: min(e.args.RTTBytes, int64(h.size)), heapIndex: -1}
		e.incoming[h.id] = im
		e.timerWake.Signal()
		if im.granted < im.size {
			e.grants.add(im)
		}
	}
	im.lastData = now
	if _, dup := im.got[h.offset]; dup {
		e.stats.Dups++
		if h.offset == 0 {
			// Its sender heard nothing and asks whether the message
			// arrived: BUSY says it did, and that this receiver will grant
			// or ask for the rest.
			e.control(src, header{typ: typeBusy, id: h.id})
		}
		return
	}
	im.got[h.offset] = h.length
	im.bytes += int64(h.length)
	e.grants.moved(im)
	im.asked = 0
	if !im.grantAt.IsZero() && int64(h.offset)+int64(h.length) >= im.granted {
		if !im.resent {
			e.grantRTT.Sample(now.Sub(im.grantAt))
		}
		im.grantAt = time.Time{}
	}
	if im.bytes >= im.size {
		e.complete(im, now)
	}
	e.grant(now)
}

// complete records a whole message and tells its sender.
func (e *endpoint) complete(im *inMsg, now time.Time) {
	delete(e.incoming, im.id)
	e.grants.remove(im)
	e.done[im.id] = true
	e.control(im.src, header{typ: typeDone, id: im.id})
	m, ok := e.schedule[im.id]
	if !ok {
		m = transport.Message{ID: im.id, Size: im.size}
		if name, found := e.env.PeerName(im.src); found {
			m.Src = name
		}
	}
	e.w.Flow(transport.Flow{ID: im.id, Pattern: m.Pattern, Src: m.Src, Dst: e.env.Host, Size: m.Size, Bytes: im.bytes,
		DSCP: m.DSCP, CC: "homa", StartNS: e.env.StartNS + m.TimeNS, EndNS: now.UnixNano(), Class: m.Class, Query: m.Query})
}

// grant runs the receiver's scheduler (§3.4, §5.2): the messages with the
// fewest bytes left, at most one per scheduled priority level (the degree
// of overcommitment), are active; each is granted enough to keep RTTbytes
// on the way, at the scheduled level of its rank, the shortest highest.
// now is when the packet that prompted it arrived: a GRANT's answer is
// timed from it, with no clock read per GRANT.
func (e *endpoint) grant(now time.Time) {
	full := 0 // fully granted here: they leave the queue after this pass
	for rank, im := range e.grants.active {
		prio := e.prio.Sched(rank)
		target := min(im.size, im.bytes+e.args.RTTBytes)
		// Grant a packet's worth at a time, or a new priority at once.
		if target >= im.granted+int64(e.mtuPay) || target == im.size || prio != im.prio {
			im.granted, im.prio = max(im.granted, target), prio
			im.grantAt = now
			e.control(im.src, header{typ: typeGrant, prio: prio, id: im.id, offset: uint32(im.granted)})
			e.stats.Grants++
		}
		if im.granted >= im.size {
			full++
		}
	}
	e.stats.MaxActive = max(e.stats.MaxActive, len(e.grants.active))
	for i := 0; full > 0; {
		if im := e.grants.active[i]; im.granted >= im.size {
			e.grants.remove(im)
			full--
			continue
		}
		i++
	}
}

// resendStalled asks for the first missing bytes of every message that
// has had no packet for the resend timeout (§7.1: receivers detect loss),
// and twice as long after each RESEND that brought nothing new. The
// timeout is ResendAfter or, when longer, what grants have been taking to
// be answered (SRTT + 4 RTTVAR, from a GRANT to the packet that ends what
// it allowed): a sender, its spacer or this receiver's own socket that the
// CPU holds up is slow, not lossy, and asking it again only adds
// packets to the load that made it slow.
func (e *endpoint) resendStalled(now time.Time) {
	timeout := e.grantRTT.RTO(time.Duration(e.args.ResendAfter))
	for _, im := range e.incoming {
		if now.Sub(im.lastData) < backoff(timeout, im.asked) {
			continue
		}
		off, end := im.firstMissing()
		if off >= end {
			continue
		}
		e.control(im.src, header{typ: typeResend, id: im.id, offset: uint32(off), length: uint32(end - off)})
		e.stats.Resends++
		im.lastData = now
		im.asked++
		im.resent = true
	}
}

// firstMissing is the first byte range of the message not received, up to
// what is granted.
func (im *inMsg) firstMissing() (off, end int64) {
	limit := min(im.granted, im.size)
	for off < limit {
		l, ok := im.got[uint32(off)]
		if !ok {
			break
		}
		off += int64(l)
	}
	end = limit
	for o := range im.got {
		if int64(o) > off && int64(o) < end {
			end = int64(o)
		}
	}
	return off, end
}

// backoff is a timeout after n unanswered tries: it doubles with each, up
// to 16 times the first, because on an overloaded machine packets that
// are only late would otherwise be asked for and re-sent again and again,
// and the duplicates load the CPU further.
func backoff(timeout time.Duration, n int) time.Duration { return timeout << min(n, maxBackoffs) }

// maxBackoffs is how many times a timeout doubles at most.
const maxBackoffs = 4
