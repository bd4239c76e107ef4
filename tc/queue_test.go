package tc_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/fabric-emu/fabric/internal/testenv"
	"github.com/fabric-emu/fabric/internal/units"
	"github.com/fabric-emu/fabric/tc"
	"github.com/fabric-emu/fabric/tc/tctest"
)

// Queue reads what Stats reads: a 10 Mbit/s ECN port offered 20 Mbit/s of
// ECT UDP fills its 60 KB buffer, and while it stays full Depth's backlog
// and Stats' read the buffer less at most a few frames (what leaves
// between two reads), the marker's counted queue reads it within K/2 (the
// counted queue's bound in TestECNThreshold), and Depth's sent bytes grow
// at the port's rate.
func TestQueueReadsThePort(t *testing.T) {
	testenv.RequireRoot(t)
	lab := tctest.NewQuietStar(t, "tq", "h1", "rx")
	port := lab.Egress("rx")
	const buffer, k = 60 * units.KB, 30 * units.KB
	apply(t, port, resolve(t, tc.PortSettings{Buffer: &tc.Buffer{Bytes: buffer},
		Marking: &tc.MarkingSpec{ECN: &tc.ECNSpec{Threshold: k}}}, 10*units.Mbit))
	// A stall of the machine in the 100 ms between the two reads holds
	// HTB's dequeue back and lowers the rate read by its length over
	// 100 ms: past 5 ms it alone breaks the ±5 % bound.
	testenv.Retry(t, 3, 5*time.Millisecond, func(a *testenv.Attempt) {
		sink := lab.ListenUDP("rx", 9300)
		defer sink.Close()
		done := make(chan error, 1)
		go func() {
			_, err := lab.SendUDP(context.Background(), tctest.UDPStream{From: "h1", To: netip.AddrPortFrom(lab.Addr("rx"), 9300),
				Rate: 20e6, Size: 1514, TOS: 2, Duration: 600 * time.Millisecond})
			done <- err
		}()
		time.Sleep(300 * time.Millisecond) // the buffer fills in 50 ms
		q, err := tc.OpenQueue(port)
		if err != nil {
			a.Fatalf("%v", err)
		}
		defer q.Close()
		first, err := q.Depth()
		if err != nil {
			a.Fatalf("%v", err)
		}
		counted, _, ok, err := q.Counted()
		if err != nil || !ok {
			a.Fatalf("counted queue: ok %v, %v", ok, err)
		}
		st, err := tc.Stats(context.Background(), port)
		if err != nil {
			a.Fatalf("%v", err)
		}
		time.Sleep(100 * time.Millisecond)
		last, err := q.Depth()
		if err != nil {
			a.Fatalf("%v", err)
		}
		if err := <-done; err != nil {
			a.Fatalf("%v", err)
		}
		rate := float64(last.Sent-first.Sent) * 8 / (float64(last.At-first.At) / 1e9)
		a.Logf("depth %d B (%d packets), counted %d B, Stats %d B; sent at %.2f Mbit/s", first.Bytes, first.Packets, counted, st.Backlog, rate/1e6)
		// A full buffer holds buffer less under a frame; four frames leave
		// the port in the 5 ms a read may be held up on a busy machine.
		lo, hi := float64(buffer)-4*1514, float64(buffer)
		for name, v := range map[string]uint64{"Depth": first.Bytes, "Depth (later)": last.Bytes, "Stats": st.Backlog} {
			if float64(v) < lo || float64(v) > hi {
				a.Errorf("%s read %d B of backlog, want the full buffer, %.0f–%.0f B", name, v, lo, hi)
			}
		}
		if d := float64(counted) - float64(first.Bytes); d < -float64(k)/2 || d > float64(k)/2 {
			a.Errorf("the counted queue read %d B against Depth's %d B, want within K/2 = %.0f B", counted, first.Bytes, float64(k)/2)
		}
		if rate < 9.5e6 || rate > 10.5e6 {
			a.Errorf("the sent bytes grew at %.2f Mbit/s, want the port's 10 Mbit/s ± 5 %%", rate/1e6)
		}
	})
}

// BenchmarkQueueRead reports what one read of a port costs: Depth (a
// netlink dump), Counted (a map lookup) and Stats (which opens the port
// each time), in µs, on an idle ECN port.
func BenchmarkQueueRead(b *testing.B) {
	testenv.RequireRoot(b)
	lab := tctest.NewQuietStar(b, "tqb", "h1", "rx")
	port := lab.Egress("rx")
	p, err := tc.PortSettings{Marking: &tc.MarkingSpec{ECN: &tc.ECNSpec{Threshold: 30 * units.KB}}}.Resolve(10*units.Mbit, 1500)
	if err != nil {
		b.Fatal(err)
	}
	if err := tc.Apply(context.Background(), port, p); err != nil {
		b.Fatal(err)
	}
	q, err := tc.OpenQueue(port)
	if err != nil {
		b.Fatal(err)
	}
	defer q.Close()
	for _, c := range []struct {
		name string
		read func() error
	}{
		{"depth", func() error { _, err := q.Depth(); return err }},
		{"counted", func() error { _, _, _, err := q.Counted(); return err }},
		{"stats", func() error { _, err := tc.Stats(context.Background(), port); return err }},
	} {
		b.Run(c.name, func(b *testing.B) {
			t0 := time.Now()
			for b.Loop() {
				if err := c.read(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(time.Since(t0).Microseconds())/float64(b.N), "µs/read")
		})
	}
}
