package transport

import (
	"context"
	"sync"
	"time"
)

// Pacer spaces one kind of a transport's packets on its host's link, so
// that the host's own queue holds at most the packet on the wire and the
// next (NDP's sender and PULL pacers, Homa's sender pacer, thesis §6.4).
//
// Its loop (Run) sends what is left when it is due. A packet that becomes
// sendable while the pacer is idle and the link free goes at once from the
// goroutine that made it so (Kick): a new message's first packet, or the
// packet a grant or a PULL lets go, does not wait for the pacer's thread
// to be woken and scheduled (tens of µs here, more on a busy machine).
//
// The owner's lock guards the pacer: Kick and Reserve are called with it
// held, Run takes it to pick each packet.
type Pacer struct {
	// MaxLead caps how early a packet is handed over before the link is
	// free (0: up to the packet's own time on the link). A wake-up that
	// was late is made up by sending the next packet early, but never
	// more than this, so a backlog never leaves as a burst.
	MaxLead time.Duration
	free    time.Time // when the next packet may go
	wake    chan struct{}
}

// NewPacer returns an idle pacer with the given MaxLead.
func NewPacer(maxLead time.Duration) *Pacer {
	return &Pacer{MaxLead: maxLead, wake: make(chan struct{}, 1)}
}

// NextPacket picks the next packet under the owner's lock: how to send it
// (called without the lock from Run, with it from Kick) and its time on
// the link (0: unpaced, the next may follow at once); false when there is
// nothing to send.
type NextPacket func() (send func(), gap time.Duration, ok bool)

// Free is when the next packet may go.
func (p *Pacer) Free() time.Time { return p.free }

// Reserve takes the slot of a packet of gap starting now.
func (p *Pacer) Reserve(now time.Time, gap time.Duration) {
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
func (p *Pacer) Signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Kick sends the next packet at once if its slot is free, and otherwise
// leaves it to the loop. Call it with the owner's lock held.
func (p *Pacer) Kick(next NextPacket) {
	now := time.Now()
	if p.free.After(now) {
		p.Signal()
		return
	}
	if send, gap, ok := next(); ok {
		p.Reserve(now, gap)
		send()
		p.Signal() // the loop sends what remains when it is due
	}
}

// Run is the pacer's loop, until ctx ends: one packet per slot. The pick is
// made only when the packet may go, so that it reflects everything that
// arrived meanwhile. It runs on a thread of its own with fine timer slack,
// at normal priority: it sends, and the send forwards the packet through
// the lab, so at real-time priority it took the CPU from the delay lines
// (docs/homa.md).
func (p *Pacer) Run(ctx context.Context, mu sync.Locker, next NextPacket) {
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
		send, gap, ok := next()
		if ok {
			p.Reserve(now, gap)
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
		send()
	}
}
