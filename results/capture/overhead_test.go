package capture_test

import (
	"context"
	"os"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fabric-emu/fabric/internal/testenv"
	"github.com/fabric-emu/fabric/internal/units"
	"github.com/fabric-emu/fabric/results/capture"
	"github.com/fabric-emu/fabric/results/internal/testlab"
)

// BenchmarkCaptureOverhead saturates a shaped router port with one TCP flow
// and measures the receiver's goodput with and without capture on two
// ports (the sender-facing ingress and the shaped egress, as an LMM run
// does), alternating the two conditions so that machine noise hits both.
// It reports both throughputs and their ratio (target: ≥ 0.95).
//
// The port rate is FABRIC_CAPTURE_BENCH_RATE (default 100Mbit, the rate the
// issue names; "1Gbit" stresses the CPU harder on this 2-core machine).
func BenchmarkCaptureOverhead(b *testing.B) {
	testenv.RequireRoot(b)
	rate := units.Rate(100 * units.Mbit)
	if s := os.Getenv("FABRIC_CAPTURE_BENCH_RATE"); s != "" {
		r, err := units.ParseRate(s)
		if err != nil {
			b.Fatalf("FABRIC_CAPTURE_BENCH_RATE: %v", err)
		}
		rate = r
	}
	lab := testlab.New(b, testlab.Spec{Senders: 1, RateBPS: uint64(rate), BurstBytes: uint32(max(1600, uint64(rate)/8/1000))})
	ln, err := lab.Listen(5001)
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	var received atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				buf := make([]byte, 256<<10)
				for {
					n, err := c.Read(buf)
					received.Add(int64(n))
					if err != nil {
						c.Close()
						return
					}
				}
			}()
		}
	}()
	const (
		warmup = 500 * time.Millisecond
		window = 3 * time.Second
	)
	// run sends for warmup+window and returns the goodput in Mbit/s over
	// the window.
	run := func(withCapture bool) float64 {
		var g *capture.Group
		if withCapture {
			dir := b.TempDir()
			in, out := lab.Point(lab.SenderIfs[0]), lab.Point(lab.ShapedIf)
			var err error
			g, err = capture.StartGroup(context.Background(), []capture.Point{in}, dir, capture.Options{Filter: capture.Filter{Direction: capture.In}})
			if err != nil {
				b.Fatal(err)
			}
			g2, err := capture.StartGroup(context.Background(), []capture.Point{out}, dir, capture.Options{Filter: capture.Filter{Direction: capture.Out}})
			if err != nil {
				b.Fatal(err)
			}
			defer func() {
				stats, err := g2.Stop()
				if err != nil {
					b.Error(err)
				}
				s1, err := g.Stop()
				if err != nil {
					b.Error(err)
				}
				for _, s := range append(s1, stats...) {
					if s.Drops > 0 {
						b.Logf("capture %s dropped %d of %d packets", s.Label, s.Drops, s.KernelPackets)
					}
				}
			}()
		}
		c, err := lab.DialTCP(0, 5001)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		stop := make(chan struct{})
		go func() {
			buf := make([]byte, 64<<10)
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := c.Write(buf); err != nil {
					return
				}
			}
		}()
		time.Sleep(warmup)
		start, t0 := received.Load(), time.Now()
		time.Sleep(window)
		bytes, dt := received.Load()-start, time.Since(t0)
		close(stop)
		c.Close()
		time.Sleep(200 * time.Millisecond) // let the queue drain between runs
		return float64(bytes) * 8 / dt.Seconds() / 1e6
	}
	var without, with []float64
	for i := 0; i < b.N; i++ {
		without = append(without, run(false))
		with = append(with, run(true))
	}
	slices.Sort(without)
	slices.Sort(with)
	mNo, mCap := without[len(without)/2], with[len(with)/2]
	b.ReportMetric(mNo, "Mbps-nocapture")
	b.ReportMetric(mCap, "Mbps-capture")
	b.ReportMetric(mCap/mNo, "ratio")
	b.Logf("port %v: without capture %v Mbit/s, with capture on 2 ports %v Mbit/s, ratio %.3f", rate, without, with, mCap/mNo)
}
