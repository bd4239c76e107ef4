package emu_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fabric-emu/fabric/emu"
	"github.com/fabric-emu/fabric/emu/emutest"
	"github.com/fabric-emu/fabric/tc/tctest"
)

// The delay issue's benchmarks (make bench prints them): accuracy of a
// delayed star's RTT idle and under load, throughput through delayed
// links, and bring-up of a delayed fat tree.

const benchStar = "name: %s\ntopology: {kind: star, hosts: 10}\nlinks: {rate: 100Mbit%s}\n"

// rttPercentiles pings from h9 to dst and returns p50 and p99.
func rttPercentiles(b *testing.B, lab *emu.Lab, dst string, n int) (time.Duration, time.Duration) {
	rtts, err := lab.RTT(context.Background(), "h9", dst, n)
	if err != nil {
		b.Fatal(err)
	}
	slices.Sort(rtts)
	return rtts[len(rtts)/2], rtts[len(rtts)*99/100]
}

// A 100 Mbit/s star with 1 ms on each direction of every host link: a
// ping crosses four, so its RTT is the lab's base RTT (the same star
// without delay) plus 4 ms; idle, and with h0's link at 90 % load from
// three UDP senders (pinging h0 itself, and h8 through an idle port).
func BenchmarkDelayAccuracy(b *testing.B) {
	base := emutest.Up(b, fmt.Sprintf(benchStar, "bdbase", ""))
	base50, _ := rttPercentiles(b, base, "h0", 200)
	if err := base.Down(context.Background()); err != nil {
		b.Fatal(err)
	}
	lab := emutest.Up(b, fmt.Sprintf(benchStar, "bdacc", ", delay: 1ms"))
	want := 4*time.Millisecond + base50
	report := func(name string, p50, p99 time.Duration) {
		b.ReportMetric(float64(p50.Microseconds()), name+"-p50-µs")
		b.ReportMetric(100*float64(p50-want)/float64(want), name+"-p50-err-%")
		b.ReportMetric(100*float64(p99-want)/float64(want), name+"-p99-err-%")
		b.Logf("%s: RTT p50 %v p99 %v, want %v (4 ms + base %v)", name, p50, p99, want, base50)
	}
	for range b.N {
		p50, p99 := rttPercentiles(b, lab, "h0", 500)
		report("idle", p50, p99)
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for _, h := range []string{"h1", "h2", "h3"} {
			wg.Go(func() {
				tctest.SendUDP(ctx, lab, tctest.UDPStream{From: h, To: netip.AddrPortFrom(lab.Host("h0").Addr(), 9000),
					Rate: 30e6, Size: 1500, Duration: 20 * time.Second})
			})
		}
		time.Sleep(time.Second)
		// To h0, through its loaded port (the ping queues behind the
		// load), and to h8, through the same delay lines' loop but an
		// idle port.
		p50, p99 = rttPercentiles(b, lab, "h0", 500)
		q50, q99 := rttPercentiles(b, lab, "h8", 500)
		cancel()
		wg.Wait()
		report("load90", p50, p99)
		report("load90-other-port", q50, q99)
		st, err := lab.DelayLoop().Stats()
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(st.Lateness(0.99).Microseconds()), "line-lateness-p99-µs")
	}
}

// Throughput through delayed links: one cubic flow across a 100 Mbit/s
// star with 1 ms on every direction (RTT 4 ms, BDP 50 KB, buffer 150 KB),
// then nine senders into one receiver.
func BenchmarkDelayedThroughput(b *testing.B) {
	lab := emutest.Up(b, fmt.Sprintf(benchStar, "bdtput", ", delay: 1ms"))
	sink := tctest.ListenTCP(b, lab, "h0", 5001)
	defer sink.Close()
	dst := netip.AddrPortFrom(lab.Host("h0").Addr(), 5001)
	measure := func(senders []string) float64 {
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for _, h := range senders {
			wg.Go(func() { tctest.TCPBulk(ctx, lab, h, dst, 0, "cubic") })
		}
		time.Sleep(2 * time.Second) // past slow start
		start, t0 := sink.Bytes(), time.Now()
		time.Sleep(8 * time.Second)
		bps := float64(sink.Bytes()-start) * 8 / time.Since(t0).Seconds()
		cancel()
		wg.Wait()
		return bps
	}
	for range b.N {
		one := measure([]string{"h1"})
		nine := measure([]string{"h1", "h2", "h3", "h4", "h5", "h6", "h7", "h8", "h9"})
		// Goodput: 1448 of every 1514 bytes the shaper counts are payload.
		b.ReportMetric(100*one/100e6/(1448.0/1514), "one-flow-%-of-rate")
		b.ReportMetric(100*nine/100e6/(1448.0/1514), "nine-to-one-%-of-rate")
		b.Logf("one cubic flow %.1f Mbit/s, nine into one %.1f Mbit/s of goodput", one/1e6, nine/1e6)
	}
}

// A k = 4 fat tree with 1 ms of delay on every link: 48 delayed
// directions, one queue each.
func BenchmarkDelayedFatTreeUp(b *testing.B) {
	s, err := emu.Parse("bdft.yaml", []byte("name: bdft\ntopology: {kind: fattree, k: 4}\nlinks: {rate: 100Mbit, delay: 1ms}\n"))
	if err != nil {
		b.Fatal(err)
	}
	for range b.N {
		t0 := time.Now()
		lab, err := emu.Up(context.Background(), s)
		if err != nil {
			b.Fatal(err)
		}
		up := time.Since(t0)
		if err := lab.Down(context.Background()); err != nil {
			b.Fatal(err)
		}
		emutest.NothingLeft(b, s.Name)
		b.ReportMetric(float64(up.Milliseconds()), "up-ms")
	}
}
