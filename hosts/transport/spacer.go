package transport

import (
	"context"
	"net/netip"
	"sync"
	"time"
)

// Spacer spaces one kind of a transport's packets on its host's link, so
// that the host's own queue holds at most the packet on the wire and the
// next (NDP's sender and PULL spacers, Homa's sender spacer: the thesis's
// pacer, §6.4).
//
// Its loop (Run) sends what is left when it is due. A packet that becomes
// sendable while the spacer is idle and the link free goes at once from the
// goroutine that made it so (Kick): a new message's first packet, or the
// packet a grant or a PULL lets go, does not wait for the spacer's thread
// to be woken and scheduled (tens of µs here, more on a busy machine).
//
// The owner's lock guards the spacer: Kick and Reserve are called with it
// held, Run takes it to pick each packet.
type Spacer struct {
	// MaxLead caps how early a packet is handed over before the link is
	// free (0: up to the packet's own time on the link). A wake-up that
	// was late is made up by sending the next packet early, but never
	// more than this, so a backlog never leaves as a burst.
	MaxLead time.Duration
	src     Source
	free    time.Time // when the next packet may go
	wake    Wake
	// Each path builds its packet in a buffer of its own: Run sends
	// without the owner's lock, so a Kick meanwhile must not overwrite
	// the packet Run is sending.
	runBuf, kickBuf []byte
}

// Packet is one packet a spacer hands its Source to send.
type Packet struct {
	To   netip.Addr
	Tag  int // the owner's per-packet detail for Send: Homa's priority, NDP's path
	Data []byte
	Gap  time.Duration // its time on the link (0: unpaced, the next may follow at once)
}

// Source is the transport behind a spacer. Next is called under the owner's
// lock; Send without it from Run and with it from Kick. Packets are values
// in a buffer the spacer owns, so pacing a packet allocates nothing.
type Source interface {
	// Next builds the next packet in buf (of the size given to
	// NewSpacer); false when there is nothing to send.
	Next(buf []byte) (Packet, bool)
	Send(Packet)
	// Pending reports whether Next may have a packet now (true when
	// unsure). After Kick sends, it wakes the loop only then: most of
	// Homa's messages are one packet, and waking the loop's thread
	// after each just to find nothing to send was a thread hand-off per
	// message.
	Pending() bool
}

// NewSpacer returns an idle spacer with the given MaxLead that sends src's
// packets of up to bufSize bytes.
func NewSpacer(maxLead time.Duration, bufSize int, src Source) *Spacer {
	return &Spacer{MaxLead: maxLead, src: src, wake: NewWake(),
		runBuf: make([]byte, bufSize), kickBuf: make([]byte, bufSize)}
}

// Free is when the next packet may go.
func (p *Spacer) Free() time.Time { return p.free }

// Reserve takes the slot of a packet of gap starting now.
func (p *Spacer) Reserve(now time.Time, gap time.Duration) {
	lead := gap
	if p.MaxLead > 0 {
		lead = min(lead, p.MaxLead)
	}
	if p.free.Before(now.Add(-lead)) {
		p.free = now.Add(-lead)
	}
	p.free = p.free.Add(gap)
}

// Signal tells the loop there may be something new to send.
func (p *Spacer) Signal() { p.wake.Signal() }

// Kick sends the next packet at once if its slot is free, and otherwise
// leaves it to the loop. Call it with the owner's lock held. It sends
// under that lock, because its callers hold it deep in their packet
// handling; the receive path waits for that one send.
func (p *Spacer) Kick() {
	now := time.Now()
	if p.free.After(now) {
		p.Signal()
		return
	}
	if pkt, ok := p.src.Next(p.kickBuf); ok {
		p.Reserve(now, pkt.Gap)
		p.src.Send(pkt)
		if p.src.Pending() {
			p.Signal() // the loop sends what remains when it is due
		}
	}
}

// Run is the spacer's loop, until ctx ends: one packet per slot. The pick is
// made only when the packet may go, so that it reflects everything that
// arrived meanwhile. It runs on a thread of its own with fine timer slack,
// at normal priority: it sends, and the send forwards the packet through
// the lab, so at real-time priority it took the CPU from the delay lines
// (docs/homa.md).
func (p *Spacer) Run(ctx context.Context, mu sync.Locker) {
	PinTimerThread()
	for ctx.Err() == nil {
		mu.Lock()
		now := time.Now()
		if free := p.free; free.After(now) {
			mu.Unlock()
			if !SleepUntil(ctx, free) {
				return
			}
			continue
		}
		pkt, ok := p.src.Next(p.runBuf)
		if ok {
			p.Reserve(now, pkt.Gap)
		}
		mu.Unlock()
		if !ok {
			select {
			case <-ctx.Done():
				return
			case <-p.wake:
			}
			continue
		}
		p.src.Send(pkt)
	}
}

// Wake is a doorbell for a goroutine that sleeps until there is work: a
// ring never blocks, and rings while it is busy count as one.
type Wake chan struct{}

// NewWake returns a doorbell that has not rung.
func NewWake() Wake { return make(Wake, 1) }

// Signal rings it.
func (w Wake) Signal() {
	select {
	case w <- struct{}{}:
	default:
	}
}
