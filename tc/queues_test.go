package tc_test

import (
	"context"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fabric-emu/fabric/internal/testenv"
	"github.com/fabric-emu/fabric/internal/units"
	"github.com/fabric-emu/fabric/tc"
	"github.com/fabric-emu/fabric/tc/tctest"
)

const mbit = 1e6

// sendAll runs the streams concurrently and waits for them.
func sendAll(t *testing.T, lab *tctest.Lab, streams ...tctest.UDPStream) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, len(streams))
	for i, s := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = lab.SendUDP(context.Background(), s)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// sampleStats reads the port's counters every interval until stop closes.
func sampleStats(t *testing.T, port tc.Target, interval time.Duration, stop <-chan struct{}) <-chan []tc.PortStats {
	out := make(chan []tc.PortStats, 1)
	go func() {
		var samples []tc.PortStats
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				out <- samples
				return
			case <-tick.C:
				s, err := tc.Stats(context.Background(), port)
				if err != nil {
					t.Error(err)
					out <- samples
					return
				}
				samples = append(samples, s)
			}
		}
	}()
	return out
}

func percentile(xs []float64, p float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	i := int(p / 100 * float64(len(s)-1))
	return s[i]
}

// Test 2: a 30-packet buffer under four flows into one 100 Mbit port drops,
// and the queue never holds more than 30 packets. UDP at 1.6× the rate
// makes the queue reach its limit for certain; with a fifo that kept its
// default limit (txqueuelen, 1000 packets) the samples would exceed 30.
func TestBufferLimit(t *testing.T) {
	testenv.RequireRoot(t)
	lab := tctest.NewStar(t, "h1", "h2", "h3", "h4", "rx")
	port := lab.Egress("rx")
	buf := tc.Buffer{Packets: 30}
	apply(t, port, resolve(t, tc.PortSettings{Buffer: &buf}, 100*units.Mbit))
	lab.ListenUDP("rx", 6000)

	stop := make(chan struct{})
	samples := sampleStats(t, port, 2*time.Millisecond, stop)
	var streams []tctest.UDPStream
	for i, h := range []string{"h1", "h2", "h3", "h4"} {
		streams = append(streams, tctest.UDPStream{From: h, To: netip.AddrPortFrom(lab.Addr("rx"), 6000),
			Rate: 40 * mbit, Size: 1514, Flow: byte(i), Duration: 3 * time.Second})
	}
	sendAll(t, lab, streams...)
	close(stop)
	got := <-samples
	last := got[len(got)-1]
	var maxPkts, maxBytes uint64
	for _, s := range got {
		maxPkts, maxBytes = max(maxPkts, s.QueuedPkt), max(maxBytes, s.Backlog)
	}
	t.Logf("%d samples: drops %d of %d packets sent; backlog max %d packets, %d bytes (limit 30 packets = %d bytes)",
		len(got), last.Drops, last.Packets, maxPkts, maxBytes, 30*1514)
	if last.Drops == 0 {
		t.Error("no drops with 160 Mbit offered to a 100 Mbit port")
	}
	if maxPkts > 30 || maxBytes > 30*1514 {
		t.Errorf("backlog reached %d packets / %d bytes, above the 30-packet buffer", maxPkts, maxBytes)
	}
	if maxPkts < 20 {
		t.Errorf("backlog never went above %d packets: the queue did not fill, the test proves nothing", maxPkts)
	}
}

// latencies returns the one-way latencies (ms) of the datagrams of flow.
func latencies(got []tctest.Datagram, flow byte) []float64 {
	var ms []float64
	for _, d := range got {
		if d.Flow == flow {
			ms = append(ms, float64(d.Latency())/1e6)
		}
	}
	return ms
}

// Test 3: strict priority. Band-1 bulk traffic saturates a 100 Mbit port;
// band-0 probes (DSCP CS7) cross it in under 1 ms at the 99th percentile,
// while band-1 probes wait behind the standing queue (over 5 ms).
func TestPriorityIsolation(t *testing.T) {
	testenv.RequireRoot(t)
	lab := tctest.NewStar(t, "bulk", "p0", "p1", "rx")
	port := lab.Egress("rx")
	apply(t, port, resolve(t, tc.PortSettings{Queues: &tc.QueuesSpec{Bands: 2}}, 100*units.Mbit))
	const cs7, cs0 = 0xe0, 0x00
	// A band-0 probe waits for at most the band-1 frame in service (121
	// µs at 100 Mbit/s) and its own stacks: a stall of the machine longer
	// than the 1 ms bound delays it where no band can help.
	testenv.Retry(t, 3, time.Millisecond, func(a *testenv.Attempt) {
		sink := lab.ListenUDP("rx", 6000+a.N)
		dst := netip.AddrPortFrom(lab.Addr("rx"), uint16(6000+a.N))
		bulk := tctest.UDPStream{From: "bulk", To: dst, Rate: 120 * mbit, Size: 1514, TOS: cs0, Flow: 9, Duration: 4 * time.Second}
		probe0 := tctest.UDPStream{From: "p0", To: dst, Rate: 200 * 8 / 1e-3, Size: 200, TOS: cs7, Flow: 0, Duration: 3 * time.Second}
		probe1 := probe0
		probe1.From, probe1.TOS, probe1.Flow = "p1", cs0, 1
		go func() {
			time.Sleep(500 * time.Millisecond) // let the band-1 queue build
			sendAll(t, lab, probe0, probe1)
		}()
		sendAll(t, lab, bulk)
		time.Sleep(100 * time.Millisecond)
		got := sink.Received()
		l0, l1 := latencies(got, 0), latencies(got, 1)
		st, err := tc.Stats(context.Background(), port)
		if err != nil {
			t.Fatal(err)
		}
		a.Logf("attempt %d: band-0 probes: n=%d p50 %.3f ms p99 %.3f ms max %.3f ms", a.N, len(l0), percentile(l0, 50), percentile(l0, 99), percentile(l0, 100))
		a.Logf("band-1 probes: n=%d p50 %.3f ms p99 %.3f ms", len(l1), percentile(l1, 50), percentile(l1, 99))
		a.Logf("port: %d packets, %d drops, bands %+v", st.Packets, st.Drops, st.Bands)
		if len(l0) < 1000 || len(l1) < 500 {
			a.Fatalf("too few probes arrived: band 0 %d, band 1 %d of ~3000 each", len(l0), len(l1))
		}
		if p := percentile(l0, 99); p >= 1 {
			a.Errorf("band-0 p99 %.3f ms, want < 1 ms", p)
		}
		// Isolation is shown only where band 1 had a queue to be isolated
		// from: the band-0 probes sent beside a band-1 probe that waited
		// over 5 ms. A queue standing throughout makes that nearly all of
		// them; the test wants 1 %, because a sender starved of CPU on a
		// loaded machine bursts and lets the queue drain between bursts (a
		// CI run on 2026-11-27 saw band 1's p50 at 0.022 ms, its p99 at
		// 12.3 ms).
		beside := besideQueue(got, 0, 1, 5)
		a.Logf("band-0 probes beside a band-1 wait over 5 ms: n=%d p99 %.3f ms", len(beside), percentile(beside, 99))
		if len(beside) < 30 {
			a.Fatalf("%d band-0 probes were sent while band 1 queued over 5 ms, want ≥ 30: no standing queue in band 1", len(beside))
		}
		if p := percentile(beside, 99); p >= 1 {
			a.Errorf("band-0 probes beside a band-1 queue of over 5 ms: p99 %.3f ms, want < 1 ms", p)
		}
	})
}

// besideQueue returns the latencies (ms) of flow's datagrams that were
// sent within 0.5 ms of one of other's that waited over waitMs: what flow
// crossed while other stood in a queue.
func besideQueue(got []tctest.Datagram, flow, other byte, waitMs float64) []float64 {
	var queued []int64 // send times of other's datagrams that waited
	for _, d := range got {
		if d.Flow == other && float64(d.Latency())/1e6 > waitMs {
			queued = append(queued, d.SentNs)
		}
	}
	slices.Sort(queued)
	const near = int64(500 * time.Microsecond)
	var ms []float64
	for _, d := range got {
		if d.Flow != flow {
			continue
		}
		i, _ := slices.BinarySearch(queued, d.SentNs-near)
		if i < len(queued) && queued[i] <= d.SentNs+near {
			ms = append(ms, float64(d.Latency())/1e6)
		}
	}
	return ms
}

// Test 4: weighted classes 3:1. Two flows, each able to fill the port
// alone, keep both classes backlogged; while they are, HTB's round robin
// gives them 75/25 of the port, to within its quantum per round (a
// frame in thousands: the split's error is the 10 ms sampling's, under a
// point), and the port, never idle, sends at its rate (within 3 %, as in
// TestRateFidelity). Both from the port's own per-band counters.
func TestWeightedClasses(t *testing.T) {
	testenv.RequireRoot(t)
	lab := tctest.NewStar(t, "a", "b", "rx")
	port := lab.Egress("rx")
	// A 1 MB buffer per class (over 100 ms at its share) keeps both
	// classes backlogged through a sender's scheduling stall.
	buf := tc.Buffer{Bytes: units.MB}
	const rate = 100 * units.Mbit
	apply(t, port, resolve(t, tc.PortSettings{Buffer: &buf, Queues: &tc.QueuesSpec{Weights: []int{3, 1}}}, rate))
	testenv.Retry(t, 3, 10*time.Millisecond, func(at *testenv.Attempt) {
		drained(t, port)
		sink := lab.ListenUDP("rx", 6000+at.N)
		defer sink.Close()
		dst := netip.AddrPortFrom(lab.Addr("rx"), uint16(6000+at.N))
		a := tctest.UDPStream{From: "a", To: dst, Rate: 110 * mbit, Size: 1514, TOS: 0xe0, Flow: 0, Duration: 3 * time.Second}
		b := a
		b.From, b.TOS, b.Flow = "b", 0, 1
		stop := make(chan struct{})
		samples := sampleStats(t, port, 10*time.Millisecond, stop)
		sendAll(t, lab, a, b)
		close(stop)
		var bytes [2]float64
		var busy time.Duration
		got := <-samples
		for i := 1; i < len(got); i++ {
			p, c := got[i-1], got[i]
			if len(p.Bands) < 2 || len(c.Bands) < 2 || min(p.Bands[0].Backlog, p.Bands[1].Backlog, c.Bands[0].Backlog, c.Bands[1].Backlog) < frameBytes {
				continue
			}
			bytes[0] += float64(c.Bands[0].Bytes - p.Bands[0].Bytes)
			bytes[1] += float64(c.Bands[1].Bytes - p.Bands[1].Bytes)
			busy += time.Duration(c.At - p.At)
		}
		if busy < time.Second {
			at.Fatalf("both classes were backlogged for only %v of 3 s", busy)
		}
		total := bytes[0] + bytes[1]
		share, sent := 100*bytes[0]/total, total*8/busy.Seconds()
		at.Logf("weights 3:1, both backlogged for %v: split %.1f/%.1f, the port sent %.1f Mbit/s", busy.Round(time.Millisecond), share, 100-share, sent/1e6)
		if share < 74 || share > 76 {
			at.Errorf("split %.1f/%.1f, want 75/25 ± 1", share, 100-share)
		}
		if e := sent/float64(rate) - 1; e < -0.03 || e > 0.03 {
			at.Errorf("the port sent %.1f Mbit/s while both classes were backlogged, want %s ± 3 %%", sent/1e6, rate)
		}
	})
}
