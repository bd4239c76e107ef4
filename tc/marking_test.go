package tc_test

import (
	"context"
	"math"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/fabric-emu/fabric/hosts/cc"
	"github.com/fabric-emu/fabric/internal/netnsutil"
	"github.com/fabric-emu/fabric/internal/testenv"
	"github.com/fabric-emu/fabric/internal/units"
	"github.com/fabric-emu/fabric/tc"
	"github.com/fabric-emu/fabric/tc/tctest"
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

// Test 5: DCTCP-style threshold marking, K = 30 KB at 500 Mbit/s,
// ECN-capable traffic (DCTCP) from two senders:
//   - marks appear;
//   - the marker's queue (bytes into the fifo minus bytes handed to the
//     driver) matches the tc backlog sampled at the same instant, within
//     K/2 on average (the error is logged: the closing figure);
//   - whenever the marker's queue is at or above K, so that it is marking,
//     the tc backlog is near K: its median is at least K less the K/2 the
//     marker may be off by, and within the 150 KB buffer;
//   - all of it still holds with the rate halved live (tc.Set "rate").
//
// The rates are ones at which two flows keep a standing queue on this
// 2-core machine (at 1 Gbit the senders are CPU-bound and the queue
// reaches K only in spikes between samples), so there are always marking
// instants to judge: fewer than 20 fail the test.
func TestECNThreshold(t *testing.T) {
	testenv.RequireRoot(t)
	lab := tctest.NewStar(t, "h1", "h2", "rx")
	for _, n := range []string{"h1", "h2", "rx"} {
		lab.Sysctl(n, "net/ipv4/tcp_ecn", "1")
	}
	port := lab.Egress("rx")
	const k = 30 * units.KB
	apply(t, port, resolve(t, tc.PortSettings{Marking: &tc.MarkingSpec{ECN: &tc.ECNSpec{Threshold: k}}}, 500*units.Mbit))
	for _, rate := range []units.Rate{500 * units.Mbit, 250 * units.Mbit} {
		if rate != 500*units.Mbit {
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
		if f.meanAbsErr > float64(k)/2 {
			t.Errorf("%s: marker queue off the tc backlog by %.1f KB on average, want ≤ %.0f KB", rate, f.meanAbsErr/1e3, float64(k)/2e3)
		}
		if f.markingSamples < 20 {
			t.Errorf("%s: only %d samples with the marker at K: the lab did not queue", rate, f.markingSamples)
		} else if b := f.backlogWhenMarking; b < float64(k)/2 || b > 150e3 {
			t.Errorf("%s: tc backlog while marking p50 %.1f KB, want near K = %s (%.0f–150 KB)", rate, b/1e3, k, float64(k)/2e3)
		}
	}
}

// The DCTCP marker marks a packet exactly when the queue it finds holds
// K bytes or more (tc/bpf/port.bpf.c, ecn_enqueue). A burst of 60
// ECT(0) frames at 1 Gbit/s into a 10 Mbit/s port with K = 30 KB: the
// port sends a frame every 1.2 ms while the burst takes 12 µs a frame, so
// frame i finds i − d frames queued, with d the frames the port has sent
// by then (d ≤ 1 while the first 20 arrive in 240 µs). The first frame
// marked is therefore ⌈K / 1514⌉ = 20 or the one after, every later one
// is marked (the queue only grows during the burst) and none before: a
// marker at 2K starts at 40. Only a sender held back by two frame times
// at the port's rate (2.4 ms) lets d grow to 2.
func TestECNMarksFromTheThreshold(t *testing.T) {
	testenv.RequireRoot(t)
	lab := tctest.NewStar(t, "a", "rx")
	port := lab.Egress("rx")
	const (
		rate  = 10 * units.Mbit
		k     = 30 * units.KB
		frame = 1514
		n     = 60
		ect0  = 0x02
	)
	buf := tc.Buffer{Bytes: 150 * units.KB} // holds the burst: nothing is dropped
	apply(t, port, resolve(t, tc.PortSettings{Buffer: &buf, Marking: &tc.MarkingSpec{ECN: &tc.ECNSpec{Threshold: k}}}, rate))
	first := (int(k) + frame - 1) / frame
	testenv.Retry(t, 3, 2*time.Duration(frame*8)*time.Second/time.Duration(rate), func(a *testenv.Attempt) {
		drained(t, port)
		sink := lab.ListenUDP("rx", 6100+a.N)
		defer sink.Close()
		sendAll(t, lab, tctest.UDPStream{From: "a", To: netip.AddrPortFrom(lab.Addr("rx"), uint16(6100+a.N)),
			Rate: 1e9, Size: frame, TOS: ect0, Duration: time.Duration(n*frame*8) * time.Nanosecond})
		drained(t, port)
		time.Sleep(20 * time.Millisecond)
		got := sink.Received()
		if len(got) == 0 {
			a.Fatalf("no datagram arrived")
		}
		slices.SortFunc(got, func(x, y tctest.Datagram) int { return int(x.Seq) - int(y.Seq) })
		marked := -1
		for i, d := range got {
			if d.CE() && marked < 0 {
				marked = i
			}
			if marked >= 0 && !d.CE() {
				a.Errorf("frame %d of the burst left unmarked after frame %d was marked: the queue only grew", i, marked)
				break
			}
		}
		a.Logf("%d of %d frames arrived; the first marked is frame %d (K = %s: %d or %d)", len(got), n, marked, k, first, first+1)
		if len(got) < n*9/10 {
			a.Fatalf("%d of %d frames arrived: the burst did not reach the port", len(got), n)
		}
		if marked < first || marked > first+1 {
			a.Errorf("the first marked frame is %d, want %d or %d: frames finding %d B or more queued are marked", marked, first, first+1, k)
		}
	})
}

// Test 6: phantom queue arithmetic (HULL §2.1). A constant-rate UDP ECT(0)
// stream crosses a 100 Mbit port whose phantom queue drains at 0.95 × rate:
//   - at 85 % of the line rate the counter drains faster than it fills:
//     CE marks ≤ 1 % of packets (threshold 15 KB, ten frames: only a
//     sender woken late sends ten frames back to back, and the smooth
//     sender skips what a late wake-up missed instead);
//   - at 100 % it grows by exactly what it saw less the drain, and
//     marks begin when, and only when, it reaches the threshold (150 KB,
//     raised live): no mark while its peak is below, and marks in the
//     interval after a sample that found it at or above.
func TestPhantomQueue(t *testing.T) {
	testenv.RequireRoot(t)
	lab := tctest.NewStar(t, "a", "rx")
	port := lab.Egress("rx")
	const rate = 100 * units.Mbit
	buf := tc.Buffer{Bytes: units.MB} // no drops: only the phantom queue matters
	apply(t, port, resolve(t, tc.PortSettings{Buffer: &buf,
		Marking: &tc.MarkingSpec{Phantom: &tc.PhantomSpec{Drain: 0.95, Threshold: 15 * units.KB}}}, rate))
	const ect0 = 0x02

	// 85 % of the line rate: a late sender is what marks, so a stall longer
	// than ten frames' time at the rate (1.2 ms) may spoil it.
	testenv.Retry(t, 3, 1200*time.Microsecond, func(a *testenv.Attempt) {
		sink := lab.ListenUDP("rx", 6002+a.N)
		defer sink.Close()
		sendAll(t, lab, tctest.UDPStream{From: "a", To: netip.AddrPortFrom(lab.Addr("rx"), uint16(6002+a.N)),
			Rate: 0.85 * float64(rate), Size: 1514, TOS: ect0, Duration: 3 * time.Second, Smooth: true})
		time.Sleep(50 * time.Millisecond)
		got := sink.Received()
		ce := 0
		for _, d := range got {
			if d.CE() {
				ce++
			}
		}
		a.Logf("85%%: %d packets, %d CE (%.2f%%)", len(got), ce, 100*float64(ce)/float64(max(len(got), 1)))
		// The stream must be there to judge: half its packets at least.
		if want := int(0.85 * float64(rate.BytesPerSecond()) / 1514 * 3); len(got) < want/2 {
			a.Fatalf("85%% of line rate: %d packets arrived of %d sent at that rate", len(got), want)
		}
		if float64(ce) > 0.01*float64(len(got)) {
			a.Errorf("85%% of line rate: %d CE marks of %d packets, want ≤ 1%%", ce, len(got))
		}
	})

	const k = 150 * units.KB
	if err := tc.Set(context.Background(), port, "marking.phantom.threshold", k.String()); err != nil {
		t.Fatal(err)
	}
	// 100 %: the checks read the port's own counters, so only a stalled
	// stream spoils them: one held back long enough that its 5 % over the
	// drain (31 KB a second) falls short of the threshold in 3 s, which
	// takes stalls of tens of ms.
	testenv.Retry(t, 3, 10*time.Millisecond, func(a *testenv.Attempt) {
		time.Sleep(100 * time.Millisecond) // the counter drains to zero
		stop := make(chan struct{})
		samples := sampleStats(t, port, 10*time.Millisecond, stop)
		sendAll(t, lab, tctest.UDPStream{From: "a", To: netip.AddrPortFrom(lab.Addr("rx"), uint16(6010+a.N)), Rate: float64(rate), Size: 1514, TOS: ect0, Duration: time.Second})
		close(stop)
		checkPhantomGrowth(a, <-samples, k)
	})
}

// checkPhantomGrowth judges a phantom queue's counter sampled while a
// stream outran its drain: its growth and where its marks began.
func checkPhantomGrowth(a *testenv.Attempt, vqs []tc.PortStats, k units.Size) {
	var ok []tc.PortStats
	for _, s := range vqs {
		if s.Phantom != nil {
			ok = append(ok, s)
		}
	}
	if len(ok) < 20 {
		a.Fatalf("only %d samples of the phantom queue", len(ok))
	}
	// The growth phase: from 10 KB up to the counter's peak.
	peak := 0
	for i, s := range ok {
		if s.Phantom.VQ >= ok[peak].Phantom.VQ {
			peak = i
		}
	}
	if ok[peak].Phantom.VQ < uint64(k) {
		a.Fatalf("the counter peaked at %d B: the stream never outran the drain to the threshold", ok[peak].Phantom.VQ)
	}
	// The growth window ends at the peak and reaches back while the counter
	// cannot have touched zero between two samples: the earlier held more
	// than the drain takes in the interval (arrivals only add). A counter
	// held at zero loses drain, so across a touch it gains more than sent −
	// drain: a sender that stalls low in the ramp does that.
	start := peak
	for start > 0 {
		prev, cur := ok[start-1], ok[start]
		if float64(prev.Phantom.VQ) <= float64(prev.Phantom.DrainBps)*float64(cur.At-prev.At)/1e9 {
			break
		}
		start--
	}
	grow := ok[start : peak+1]
	if len(grow) < 10 {
		all := float64(ok[peak].Phantom.Bytes-ok[0].Phantom.Bytes) / (float64(ok[peak].At-ok[0].At) / 1e9)
		a.Stalled("the sender delivered %.1f Mbit/s and the counter may have touched zero %d samples before its peak", all*8/1e6, peak-start)
		a.Fatalf("the counter stayed clear of zero for only %d samples before its peak of %d B", len(grow), ok[peak].Phantom.VQ)
	}
	// While it stays above zero the counter gains what it saw less the
	// drain, both read together from the marker on its clock (At): its own
	// byte count, not the qdisc's, which counts packets at another point
	// of their way. The slack is a frame either side (the counter moves a
	// packet at a time) and 1 % for the drain's integer arithmetic.
	first, last := grow[0], grow[len(grow)-1]
	span := float64(last.At-first.At) / 1e9
	sent := float64(last.Phantom.Bytes-first.Phantom.Bytes) / span
	drain := float64(first.Phantom.DrainBps)
	growth := (float64(last.Phantom.VQ) - float64(first.Phantom.VQ)) / span
	slack := 0.01 + 2*1514/((sent-drain)*span)
	a.Logf("100%%: port sent %.2f Mbit/s; counter grew at %.0f B/s against sent − drain %.0f B/s (%+.2f%%, slack %.2f%%)",
		sent*8/1e6, growth, sent-drain, 100*(growth/(sent-drain)-1), 100*slack)
	if e := math.Abs(growth/(sent-drain) - 1); e > slack {
		a.Errorf("the counter grew at %.0f B/s, want sent − drain = %.0f B/s within %.2f%%", growth, sent-drain, 100*slack)
	}
	marks0, reached := ok[0].Phantom.Marks, -1
	for i, s := range ok {
		if s.Phantom.VQMax < uint64(k) && s.Phantom.Marks != marks0 {
			a.Errorf("sample %d: %d marks while the counter's peak was %d B, below the threshold %d", i, s.Phantom.Marks-marks0, s.Phantom.VQMax, uint64(k))
		}
		if reached < 0 && s.Phantom.VQ >= uint64(k) {
			reached = i
		}
	}
	if reached >= 0 && reached < peak && ok[reached+1].Phantom.Marks == marks0 {
		a.Errorf("the counter was at %d B ≥ %d, yet the next 10 ms brought no mark", ok[reached].Phantom.VQ, uint64(k))
	}
}

// TestPhantomQueueSerializes: HULL's PQ sits on a wire that delivers
// packets at the line rate C, so a burst grows it by only (1 − γ) of each
// packet. A veth has no serialization: the PQ counts each packet when a
// wire at C would deliver it, not when HTB hands it over (a tenth of a
// frame early at most). Bursts of 8 back-to-back ECT
// frames through an idle 100 Mbit port with §6.1's PQ (γ = 0.95, 1 KB)
// must therefore go unmarked (8 × 5 % of 1514 B is under 1 KB), and the
// counter must stay near one frame. Counting each burst at the instant it
// reached the wire marked 7 of every 8 packets, with the counter near
// 8 frames.
func TestPhantomQueueSerializes(t *testing.T) {
	testenv.RequireRoot(t)
	lab := tctest.NewStar(t, "a", "rx")
	port := lab.Egress("rx")
	const rate = 100 * units.Mbit
	// The switch resolves rx's address before the port is measured, as a
	// fabric lab's permanent neighbour entries do: of a burst the switch
	// held for ARP, one packet left uncounted by the phantom queue in 1 of
	// 10 runs on a loaded machine, and none of the bursts after it.
	if _, err := lab.SendUDP(context.Background(), tctest.UDPStream{From: "a", To: netip.AddrPortFrom(lab.Addr("rx"), 6003),
		Rate: 1e6, Size: 100, Duration: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	apply(t, port, resolve(t, tc.PortSettings{
		Marking: &tc.MarkingSpec{Phantom: &tc.PhantomSpec{Drain: 0.95, Threshold: units.KB}}}, rate))
	dst := netip.AddrPortFrom(lab.Addr("rx"), 6002)
	sink := lab.ListenUDP("rx", 6002)
	const bursts, perBurst, frame = 20, 8, 1514
	missesBefore := xmitMisses(t, lab.Name)
	for range bursts {
		// 10 Gbit/s from a host whose NIC has no shaper: the frames reach
		// the port within microseconds of each other.
		n, err := lab.SendUDP(context.Background(), tctest.UDPStream{From: "a", To: dst, Rate: 10e9, Size: frame, TOS: 0x02,
			Duration: (perBurst - 1) * frame * 8 / 10 * time.Nanosecond}) // the last frame leaves at (n−1)·size/rate
		if err != nil {
			t.Fatal(err)
		}
		if n != perBurst {
			t.Fatalf("sent %d frames in a burst, want %d", n, perBurst)
		}
		time.Sleep(20 * time.Millisecond) // the port and the counter drain
	}
	time.Sleep(50 * time.Millisecond)
	got := sink.Received()
	sink.Close()
	st, err := tc.Stats(context.Background(), port)
	if err != nil {
		t.Fatal(err)
	}
	if st.Phantom == nil {
		t.Fatal("no phantom queue counters")
	}
	ce := 0
	for _, d := range got {
		if d.CE() {
			ce++
		}
	}
	misses := xmitMisses(t, lab.Name) - missesBefore
	t.Logf("%d bursts of %d: %d packets arrived, %d CE; phantom saw %d packets (%d ECT), marked %d, vq max %d B; port_xmit missed %d runs; the qdisc sent %d packets",
		bursts, perBurst, len(got), ce, st.Phantom.Packets, st.Phantom.ECT, st.Phantom.Marks, st.Phantom.VQMax, misses, st.Packets)
	if len(got) < bursts*perBurst*9/10 {
		t.Fatalf("only %d of %d packets arrived", len(got), bursts*perBurst)
	}
	// Every frame was ECT(0); the counter reads that from the departing
	// packet's header. It misses only what the kernel did not run it for.
	if st.Phantom.ECT+misses < uint64(len(got)) || st.Phantom.ECT > st.Phantom.Packets {
		t.Errorf("phantom queue counted %d ECT packets of %d seen, want ≥ the %d ECT packets that arrived less port_xmit's %d misses",
			st.Phantom.ECT, st.Phantom.Packets, len(got), misses)
	}
	if ce != 0 || st.Phantom.Marks != 0 {
		t.Errorf("bursts below the threshold's worth of serialized growth were marked: %d CE at the receiver, %d marks", ce, st.Phantom.Marks)
	}
	// One frame plus the growth of the rest, with room for two bursts
	// that met (a late sender) but not for a burst counted unserialized.
	if limit := uint64(frame + 2*perBurst*frame/20); st.Phantom.VQMax > limit {
		t.Errorf("phantom queue reached %d B, want ≤ %d B for serialized bursts", st.Phantom.VQMax, limit)
	}
}

// A marking port re-applied as a plain port by a process that did not
// build it (only the pinned maps are shared) loses its programs and map
// entries on both ends of the link, and stops marking.
func TestPlainAgainFromAnotherProcess(t *testing.T) {
	testenv.RequireRoot(t)
	lab := tctest.NewStar(t, "h1", "rx")
	port := lab.Egress("rx")
	apply(t, port, resolve(t, tc.PortSettings{Marking: &tc.MarkingSpec{ECN: &tc.ECNSpec{Threshold: 30 * units.KB}}}, 100*units.Mbit))
	filters := func(nsPath, ifname string, hook uint32) int {
		n := 0
		if err := netnsutil.Do(nsPath, func() error {
			l, err := netlink.LinkByName(ifname)
			if err != nil {
				return err
			}
			fs, err := netlink.FilterList(l, hook)
			for _, f := range fs {
				if bf, ok := f.(*netlink.BpfFilter); ok && bf.Name == "fabric_port" {
					n++
				}
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return n
	}
	egress := func() int { return filters(port.NetNS, port.Ifname, netlink.HANDLE_MIN_EGRESS) }
	peer := func() int { return filters(port.PeerNetNS, port.PeerIfname, netlink.HANDLE_MIN_INGRESS) }
	if egress() != 1 || peer() != 1 {
		t.Fatalf("marking port: %d egress and %d peer filters, want 1 and 1", egress(), peer())
	}
	tc.ForgetLoadedForTest(lab.Name)
	apply(t, port, resolve(t, tc.PortSettings{}, 100*units.Mbit))
	if egress() != 0 || peer() != 0 {
		t.Errorf("plain again: %d egress and %d peer filters left", egress(), peer())
	}
	st, err := tc.Stats(context.Background(), port)
	if err != nil {
		t.Fatal(err)
	}
	if st.ECN != nil || st.Phantom != nil {
		t.Errorf("plain again, but the port still reports a marker: %+v", st)
	}
}

// xmitMisses is tc.XmitMisses, fatal on error.
func xmitMisses(t *testing.T, lab string) uint64 {
	t.Helper()
	n, err := tc.XmitMisses(lab)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
