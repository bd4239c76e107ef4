package experiments

import (
	"context"
	"fmt"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/fabric-emu/fabric/emu"
	"github.com/fabric-emu/fabric/internal/testenv"
	"github.com/fabric-emu/fabric/results/capture"
	"github.com/fabric-emu/fabric/results/lmm"
	"github.com/fabric-emu/fabric/tc/tctest"
)

// switchLatency runs two open-loop UDP senders at 75 Mbit/s each into a
// 100 Mbit/s star's h0, which keeps s0:eth0's 60 KB buffer full (an
// unresponsive load cannot back off), and returns the LMM's median and
// 99th-percentile switch latency at s0, in µs. A full buffer is a known
// queue: 60 KB at 100 Mbit/s is 4.8 ms, with or without delay on the
// links, where a load just under the rate would make the queue depend on
// the load's exact rate and timing.
func switchLatency(t *testing.T, name, links string) (mean, p99 float64) {
	t.Helper()
	s, err := emu.Parse(name+".yaml", fmt.Appendf(nil, "name: %s\ntopology: {kind: star, hosts: 3}\nlinks: {%s}\nports: {buffer: 60KB}\n", name, links))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	lab, err := emu.Up(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	defer lab.Down(ctx)
	ns, err := lab.NetNS("s0")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var files []string
	var sessions []*capture.Session
	for _, p := range []struct {
		ifname string
		dir    capture.Direction
	}{{"eth1", capture.In}, {"eth2", capture.In}, {"eth0", capture.Out}} {
		c, err := capture.Start(ctx, capture.Point{NetNS: ns, Ifname: p.ifname, Label: "s0:" + p.ifname},
			dir, capture.Options{Filter: capture.Filter{IPv4Only: true, Direction: p.dir}})
		if err != nil {
			t.Fatal(err)
		}
		sessions = append(sessions, c)
		files = append(files, c.File())
	}
	sink := tctest.ListenUDP(t, lab, "h0", 9000)
	defer sink.Close()
	var wg sync.WaitGroup
	for _, h := range []string{"h1", "h2"} {
		wg.Go(func() {
			if _, err := tctest.SendUDP(ctx, lab, tctest.UDPStream{From: h, To: netip.AddrPortFrom(lab.Host("h0").Addr(), 9000),
				Rate: 75e6, Size: 1500, Duration: 3 * time.Second}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	time.Sleep(100 * time.Millisecond)
	for _, c := range sessions {
		if _, err := c.Stop(); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "lmm"), 0o755); err != nil {
		t.Fatal(err)
	}
	sum, err := lmm.Measure(filepath.Join(dir, "lmm"), "s0", files[:2], files[2], lmm.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		os.Remove(f)
	}
	return sum.US.P50, sum.US.P99
}

// The LMM's switch latency excludes link delay: the same open-loop load
// through the same port measures the same switch latency with and without
// 2 ms of delay on every link.
func TestLMMUnchangedByDelay(t *testing.T) {
	testenv.RequireRoot(t)
	m0, p0 := switchLatency(t, fmt.Sprintf("tlmd%d", os.Getpid()%1000), "rate: 100Mbit")
	m2, p2 := switchLatency(t, fmt.Sprintf("tlmd%d", os.Getpid()%1000), "rate: 100Mbit, delay: 2ms")
	t.Logf("switch latency p50 %.1f µs, p99 %.1f µs without delay; %.1f µs, %.1f µs with 2 ms on every link", m0, p0, m2, p2)
	if m0 < 4000 || m0 > 5500 {
		t.Fatalf("median switch latency %.1f µs without delay, want about 4.8 ms (a full 60 KB buffer at 100 Mbit/s)", m0)
	}
	// 2 ms leaking in would move every percentile by 2 ms, +40 % at the
	// median. The p99 is logged, not judged: a CI run on 2026-11-27 (a
	// boot with the idle delay line 326 µs late at p99) measured it 2.9 ms
	// apart, 4932 against 7831 µs, with the medians 1.7 µs apart, which is
	// HTB served late on a starved CPU in one run, not a leak.
	if math.Abs(m2-m0) > 0.05*m0 {
		t.Errorf("switch latency p50 %.1f µs with delay, %.1f without: the delay leaks into the LMM", m2, m0)
	}
}
