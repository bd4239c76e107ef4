package transport

import (
	"context"
	"sync"
	"testing"
	"time"
)

// After an idle spell a spacer lets a packet go at once and the next up to
// its lead early, never a longer burst; a lead capped below the packet's
// time spaces the second packet by the difference.
func TestPacerReserveBoundsTheBurst(t *testing.T) {
	now := time.Unix(1000, 0)
	gap := time.Millisecond
	for _, c := range []struct {
		maxLead, wantNext time.Duration // the second packet's earliest time after the first
	}{
		{0, 0}, // up to one gap early: back to back
		{200 * time.Microsecond, 800 * time.Microsecond}, // 200 µs early at most
	} {
		p := NewSpacer(c.maxLead, 0, nil)
		p.Reserve(now, gap)
		if got := p.Free().Sub(now); got != c.wantNext {
			t.Errorf("MaxLead %v: the second packet may go %v after the first, want %v", c.maxLead, got, c.wantNext)
		}
		p.Reserve(p.Free(), gap)
		if got := p.Free().Sub(now); got != c.wantNext+gap {
			t.Errorf("MaxLead %v: the third packet may go %v after the first, want %v", c.maxLead, got, c.wantNext+gap)
		}
	}
	// Unpaced packets (gap 0) never hold the next one back.
	p := NewSpacer(0, 0, nil)
	for range 10 {
		p.Reserve(now, 0)
	}
	if p.Free().After(now) {
		t.Errorf("unpaced packets reserved the link until %v", p.Free().Sub(now))
	}
}

// countdown is a Source of left packets of 20 ms each; it records when
// each was sent. Run sends without the owner's lock, Kick with it, so the
// record has a lock of its own.
type countdown struct {
	left int // guarded by the owner's lock
	mu   sync.Mutex
	sent []time.Time
}

func (c *countdown) Next(buf []byte) (Packet, bool) {
	if c.left == 0 {
		return Packet{}, false
	}
	c.left--
	buf[0] = byte(c.left)
	return Packet{Data: buf[:1], Gap: 20 * time.Millisecond}, true
}

func (c *countdown) Pending() bool { return c.left > 0 }

func (c *countdown) Send(p Packet) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sent = append(c.sent, time.Now())
}

func (c *countdown) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.sent)
}

// Kick sends at once only while the slot is free; otherwise it leaves the
// packet to the loop, which sends it when it is due, one slot per packet.
func TestPacerKickAndRun(t *testing.T) {
	var mu sync.Mutex
	src := &countdown{}
	p := NewSpacer(0, 1, src)
	mu.Lock()
	src.left = 4
	p.Kick() // the link is free: the first goes at once
	p.Kick() // up to one gap early: so does the second
	p.Kick() // the third must wait for its slot
	if n := src.count(); n != 2 || src.left != 2 {
		t.Fatalf("three kicks on an idle link sent %d packets, want 2", n)
	}
	mu.Unlock()

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); p.Run(ctx, &mu) }()
	deadline := time.Now().Add(10 * time.Second)
	for src.count() != 4 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
	sent := src.sent
	if len(sent) != 4 {
		t.Fatalf("the loop sent %d of the 4 packets", len(sent))
	}
	// Sleeps are only ever late, so each slot is a lower bound.
	if d := sent[3].Sub(sent[0]); d < 40*time.Millisecond {
		t.Errorf("4 packets of 20 ms took %v from the first to the last, want ≥ 40 ms", d)
	}
}

// Kick wakes the loop after its own send only when more is pending: a
// one-packet message must not cost the loop's thread a wake-up.
func TestKickWakesTheLoopOnlyForMore(t *testing.T) {
	for _, c := range []struct {
		left     int
		wantWake bool
	}{{1, false}, {2, true}} {
		src := &countdown{left: c.left}
		p := NewSpacer(0, 1, src)
		p.Kick()
		if src.count() != 1 {
			t.Fatalf("%d packets left: Kick on an idle link sent %d, want 1", c.left, src.count())
		}
		if woke := len(p.wake) == 1; woke != c.wantWake {
			t.Errorf("%d packets left: Kick rang the loop: %v, want %v", c.left, woke, c.wantWake)
		}
	}
}
