package delay

import (
	"time"

	"github.com/fabric-emu/fabric/internal/netnsutil"
)

// Stats is what the delay lines did since they started.
type Stats struct {
	Lines []LineStats
	// Realtime says the loop could run at real-time priority; Demoted is
	// how long it ran out of it because it was saturated (priority.go).
	Realtime bool
	Demoted  time.Duration
	// Packets released and how late each was beyond its line's delay.
	lateness histogram
}

// LineStats counts one line's packets.
type LineStats struct {
	Name    string
	Packets uint64 // arrived
	Lost    uint64 // dropped because the line's loss asked
	// Overflow counts packets the kernel dropped because the line's queue
	// or the loop's socket was full: drops nobody asked for.
	Overflow uint64
}

// Stats reads the lines' counters and the kernel's drop counts.
func (w *eventLoop) Stats() (Stats, error) {
	var kernel map[uint16][2]uint64
	err := netnsutil.Do(w.netns, func() error {
		var err error
		kernel, err = queueStats()
		return err
	})
	s := Stats{Realtime: w.prio.granted, Demoted: w.prio.demoted(time.Now().UnixNano())}
	for i, l := range w.lines {
		k := kernel[uint16(i)]
		s.Lines = append(s.Lines, LineStats{Name: l.Name, Packets: w.state[i].packets.Load(),
			Lost: w.state[i].lost.Load(), Overflow: k[0] + k[1]})
	}
	w.mu.Lock()
	s.lateness = w.hist
	w.mu.Unlock()
	return s, err
}

// Since is what happened between an earlier reading and s.
func (s Stats) Since(before Stats) Stats {
	out := Stats{Realtime: s.Realtime, Demoted: s.Demoted - before.Demoted, lateness: s.lateness.sub(&before.lateness)}
	for i, l := range s.Lines {
		if i < len(before.Lines) {
			b := before.Lines[i]
			l.Packets, l.Lost, l.Overflow = l.Packets-b.Packets, l.Lost-b.Lost, l.Overflow-b.Overflow
		}
		out.Lines = append(out.Lines, l)
	}
	return out
}

// Lateness is how long after its due time the p-quantile packet was
// released, and the worst.
func (s Stats) Lateness(p float64) time.Duration { return s.lateness.quantile(p) }

// MaxLateness is the latest release.
func (s Stats) MaxLateness() time.Duration { return s.lateness.max }

// Released counts the packets released.
func (s Stats) Released() uint64 { return s.lateness.n }

// Totals sums the lines.
func (s Stats) Totals() LineStats {
	var t LineStats
	for _, l := range s.Lines {
		t.Packets += l.Packets
		t.Lost += l.Lost
		t.Overflow += l.Overflow
	}
	return t
}
