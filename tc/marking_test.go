package tc_test

import (
	"context"
	"math"
	"net/netip"
	"sync"
	"testing"
	"time"

	"fabric/hosts/cc"
	"fabric/internal/testenv"
	"fabric/internal/units"
	"fabric/tc"
	"fabric/tc/tctest"
)

// ecnRun drives two DCTCP flows through port for d and samples the port.
// DCTCP cuts its window in proportion to the fraction of marked bytes, so
// the queue settles around the marking threshold (Alizadeh et al. §3).
type ecnRun struct {
	samples []tc.PortStats
	goodput float64 // bits/s at the receiver, both flows
}

func runECN(t *testing.T, lab *tctest.Lab, port tc.Target, rx string, senders []string, d time.Duration) ecnRun {
	t.Helper()
	// The kernel has no dctcp; hosts/cc registers fabric's BPF DCTCP
	// under that name for as long as we hold it.
	release, _, err := cc.Ensure(context.Background(), cc.DCTCP)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	sink := lab.ListenTCP(rx, 5002)
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var wg sync.WaitGroup
	for _, h := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := lab.TCPBulk(ctx, h, netip.AddrPortFrom(lab.Addr(rx), 5002), 0, cc.DCTCP); err != nil {
				t.Error(err)
			}
		}()
	}
	time.Sleep(500 * time.Millisecond) // past slow start
	stop := make(chan struct{})
	samples := sampleStats(t, port, time.Millisecond, stop)
	b0, t0 := sink.Bytes(), time.Now()
	<-ctx.Done()
	close(stop)
	run := ecnRun{samples: <-samples}
	run.goodput = float64(sink.Bytes()-b0) * 8 / time.Since(t0).Seconds()
	wg.Wait()
	sink.Close()
	return run
}

// ecnFigures summarises a run: marks, the tc backlog at the instants the
// marker's queue was at or above K (so it was marking), and the error of
// the marker's queue against the tc backlog.
type ecnFigures struct {
	marks, ect               uint64
	samples, markingSamples  int
	backlogWhenMarking       float64 // p50 bytes over samples with marker queue ≥ K
	meanErr, meanAbsErr, rms float64 // marker queue − tc backlog, bytes, samples with a queue
	backlogP50, backlogP99   float64
}

func summarise(run ecnRun, k units.Size) ecnFigures {
	var f ecnFigures
	var marking, diffs, backlog []float64
	for _, s := range run.samples {
		// A read that took long compares two different instants: at
		// 1 Gbit 100 µs is 12.5 KB of queue.
		if s.ECN == nil || s.ReadNs > 100e3 {
			continue
		}
		f.samples++
		if s.ECN.VQ >= uint64(k) {
			marking = append(marking, float64(s.Backlog))
		}
		if s.Backlog > 0 || s.ECN.VQ > 0 {
			diffs = append(diffs, float64(s.ECN.VQ)-float64(s.Backlog))
			backlog = append(backlog, float64(s.Backlog))
		}
	}
	first, last := run.samples[0].ECN, run.samples[len(run.samples)-1].ECN
	f.marks, f.ect = last.Marks-first.Marks, last.ECT-first.ECT
	f.markingSamples = len(marking)
	f.backlogWhenMarking = percentile(marking, 50)
	for _, d := range diffs {
		f.meanErr += d
		f.meanAbsErr += math.Abs(d)
		f.rms += d * d
	}
	if n := float64(len(diffs)); n > 0 {
		f.meanErr /= n
		f.meanAbsErr /= n
		f.rms = math.Sqrt(f.rms / n)
	}
	f.backlogP50, f.backlogP99 = percentile(backlog, 50), percentile(backlog, 99)
	return f
}

// Test 5: DCTCP-style threshold marking, K = 30 KB at 1 Gbit, ECN-capable
// traffic (DCTCP) from two senders:
//   - marks appear;
//   - the marker's queue (bytes into the fifo minus bytes handed to the
//     driver) matches the tc backlog sampled at the same instant, within a
//     third of K on average (the error is logged: the closing figure);
//   - whenever the marker's queue is at or above K, so that it is marking,
//     the tc backlog is near K (p50 within K − 10 KB and the 150 KB buffer);
//   - all of it still holds with the rate halved live (tc.Set "rate").
func TestECNThreshold(t *testing.T) {
	testenv.RequireRoot(t)
	lab := tctest.NewStar(t, "h1", "h2", "rx")
	for _, n := range []string{"h1", "h2", "rx"} {
		lab.Sysctl(n, "net/ipv4/tcp_ecn", "1")
	}
	port := lab.Egress("rx")
	const k = 30 * units.KB
	apply(t, port, resolve(t, tc.PortSpec{Marking: &tc.MarkingSpec{ECN: &tc.ECNSpec{Threshold: k}}}, units.Gbit))
	for _, rate := range []units.Rate{units.Gbit, 500 * units.Mbit} {
		if rate != units.Gbit {
			if err := tc.Set(context.Background(), port, "rate", rate.String()); err != nil {
				t.Fatal(err)
			}
		}
		run := runECN(t, lab, port, "rx", []string{"h1", "h2"}, 3*time.Second)
		f := summarise(run, k)
		t.Logf("%s: DCTCP goodput %.0f Mbit/s; %d samples (%d read within 100 µs); %d CE marks of %d ECT packets; tc backlog p50 %.1f KB p99 %.1f KB",
			rate, run.goodput/1e6, len(run.samples), f.samples, f.marks, f.ect, f.backlogP50/1e3, f.backlogP99/1e3)
		t.Logf("%s: marker queue − tc backlog: mean %+.1f KB, mean |err| %.1f KB, rms %.1f KB; tc backlog while marking p50 %.1f KB (K = %s, %d samples)",
			rate, f.meanErr/1e3, f.meanAbsErr/1e3, f.rms/1e3, f.backlogWhenMarking/1e3, k, f.markingSamples)
		if f.marks == 0 || f.ect == 0 {
			t.Errorf("%s: %d CE marks of %d ECT packets: no marking", rate, f.marks, f.ect)
			continue
		}
		if f.meanAbsErr > float64(k)/3 {
			t.Errorf("%s: marker queue off the tc backlog by %.1f KB on average, want ≤ %.0f KB", rate, f.meanAbsErr/1e3, float64(k)/3e3)
		}
		if f.markingSamples > 0 {
			if b := f.backlogWhenMarking; b < float64(k)-10e3 || b > 150e3 {
				t.Errorf("%s: tc backlog while marking p50 %.1f KB, want near K = %s (20–150 KB)", rate, b/1e3, k)
			}
		}
	}
}
