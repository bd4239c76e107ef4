package lmm_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fabric-emu/fabric/internal/netnsutil"

	"github.com/fabric-emu/fabric/emu"
	"github.com/fabric-emu/fabric/emu/emutest"
	"github.com/fabric-emu/fabric/internal/testenv"
	"github.com/fabric-emu/fabric/results/capture"
	"github.com/fabric-emu/fabric/results/internal/testlab"
	"github.com/fabric-emu/fabric/results/lmm"
	"github.com/fabric-emu/fabric/results/stats"
)

const (
	rateBPS   = 100e6
	frameLen  = 1514 // 1472 B of UDP payload + 28 B IP/UDP + 14 B Ethernet
	probePort = 9000
	burstLen  = 25 // packets per sender per burst
	bursts    = 6
)

// serialization is one full-size frame at the port rate: 121.12 µs.
var serialization = float64(frameLen*8) / rateBPS * 1e9

// match is one matched packet from the per-packet CSV.
type match struct{ in, out int64 }

// writer is a connected UDP socket of a sender.
type writer interface{ Write([]byte) (int, error) }

// rig is a switch under test: two senders' sockets, the switch's two
// sender-facing ports and its 100 Mbit port towards the receiver, and that
// port's HTB burst.
type rig struct {
	tx         []writer
	ingress    []capture.Point
	egress     capture.Point
	burstBytes int
	criteria   criteria
}

// criteria is what an attempt must meet.
type criteria struct {
	// within is the fraction of departures whose residual must be within
	// 15 µs + 5% of the predicted latency.
	within float64
	// oneFrameCap, if set, fails any residual beyond the tolerance plus
	// one frame time.
	oneFrameCap bool
	// medianWithin, if set, bounds the median residual (ns).
	medianWithin float64
}

// TestSwitchLatencyAccuracy is the accuracy test on a lab built
// here from the kernel alone (testlab: namespaces, veths, an HTB class with
// a bfifo leaf), so it depends on nothing but the kernel. Two senders send
// back-to-back bursts of full-size packets through an idle 100 Mbit port
// at the same moment, so a queue forms; the LMM's latency of each departing
// packet must equal the queueing the port rate predicts within 15 µs + 5%.
// The no-burst latency floor (namespace forwarding cost) is measured first
// and reported.
func TestSwitchLatencyAccuracy(t *testing.T) {
	testenv.RequireRoot(t)
	lab := testlab.New(t, testlab.Spec{Senders: 2, RateBPS: rateBPS})
	rx, err := lab.ListenUDP(probePort)
	if err != nil {
		t.Fatal(err)
	}
	drain(t, rx)
	r := rig{egress: lab.Point(lab.ShapedIf), burstBytes: int(lab.BurstBytes),
		criteria: criteria{within: 0.95, oneFrameCap: true}}
	for i, ifname := range lab.SenderIfs {
		c, err := lab.DialUDP(i, probePort)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		r.tx = append(r.tx, c)
		r.ingress = append(r.ingress, lab.Point(ifname))
	}
	accuracy(t, r)
}

// TestSwitchLatencyAccuracyStarLab runs the same test on the product: a
// star lab from emu (fabric's namespaces, addressing and routes) whose
// switch ports are shaped by package tc at 100 Mbit, with tc's own HTB
// burst. The hosts' NICs are set to 10 Gbit so that each sender's burst
// reaches the switch back to back, as the test asks; at 100 Mbit
// the NICs would pace the senders and no queue would stand at the switch.
func TestSwitchLatencyAccuracyStarLab(t *testing.T) {
	lab := emutest.Up(t, "name: "+emutest.Name("tlmm-")+"\ntopology: {kind: star, hosts: 3}\nlinks: {rate: 100Mbit}\nhosts: {nic: {rate: 10Gbit}}\n")
	sw := lab.Graph.Node("s0")
	portTo := func(host string) *emu.Iface {
		for _, i := range sw.Ifaces {
			if i.Peer.Node.Name == host {
				return i
			}
		}
		t.Fatalf("s0 has no port to %s", host)
		return nil
	}
	point := func(i *emu.Iface) capture.Point {
		return capture.Point{NetNS: netnsutil.Path(lab.Name, "s0"), Ifname: i.Name, Label: i.Label()}
	}
	receiver := lab.Graph.Node("h2")
	var rx *net.UDPConn
	if err := lab.Do("h2", func() (err error) {
		rx, err = net.ListenUDP("udp4", &net.UDPAddr{Port: probePort})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	drain(t, rx)
	out := portTo("h2")
	// tc's port bucket is 100 µs at the rate (tc/apply.go, timerSlack): a
	// queued departure waits for HTB's timer, whose lateness the bucket
	// credits back up to that much. The LMM is held to the strict criteria
	// in TestSwitchLatencyAccuracy; here, with the product's ports, 90% of
	// departures must be within 15 µs + 5% of the prediction from their
	// arrival and the departure before them, and the median residual within
	// 5 µs.
	r := rig{egress: point(out), burstBytes: tcBurstBytes(rateBPS),
		criteria: criteria{within: 0.90, medianWithin: 5e3}}
	for _, h := range []string{"h0", "h1"} {
		var c *net.UDPConn
		if err := lab.Do(h, func() (err error) {
			c, err = net.DialUDP("udp4", nil, &net.UDPAddr{IP: receiver.Addr.AsSlice(), Port: probePort})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		r.tx = append(r.tx, c)
		r.ingress = append(r.ingress, point(portTo(h)))
	}
	accuracy(t, r)
}

// tcBurstBytes is package tc's HTB burst for a port: 100 µs at the rate,
// and at least a tenth of a full frame (tc/apply.go, timerSlack and
// burstFraction). The prediction needs it to know how many frames of a
// burst leave at once.
func tcBurstBytes(rate float64) int { return max(frameLen/10, int(rate/8*100e-6)) }

// drain reads rx until the test ends, so the receiver's socket buffer never
// matters and the receiver never answers with ICMP port-unreachable.
func drain(t *testing.T, rx *net.UDPConn) {
	t.Cleanup(func() { rx.Close() })
	go func() {
		buf := make([]byte, 2048)
		for {
			if _, err := rx.Read(buf); err != nil {
				return
			}
		}
	}()
}

// accuracy measures the floor, then the bursts, and checks the residuals.
func accuracy(t *testing.T, r rig) {
	floorMatches := measure(t, r, func(seq *uint64) {
		// One packet every 2 ms: the queue is always empty.
		for i := 0; i < 200; i++ {
			send(t, r.tx[i%2], seq)
			time.Sleep(2 * time.Millisecond)
		}
	})
	floor := make([]float64, len(floorMatches))
	for i, m := range floorMatches {
		floor[i] = float64(m.out - m.in)
	}
	fs := stats.Summarize(floor)
	t.Logf("latency floor (no queue), %d packets: min %.1f µs, p50 %.1f µs, mean %.1f µs, p99 %.1f µs, max %.1f µs",
		fs.N, fs.Min/1e3, fs.P50/1e3, fs.Mean/1e3, fs.P99/1e3, fs.Max/1e3)
	if fs.N != 200 {
		t.Fatalf("floor: matched %d of 200 packets", fs.N)
	}

	// A softirq held back longer than two frame times stalls the port's
	// timer (see evaluate): only such an attempt runs again.
	testenv.Retry(t, 3, 2*time.Duration(serialization), func(a *testenv.Attempt) {
		burstMatches := measure(t, r, func(seq *uint64) { sendBursts(t, r.tx, seq) })
		if len(burstMatches) != 2*burstLen*bursts {
			t.Fatalf("bursts: matched %d of %d packets", len(burstMatches), 2*burstLen*bursts)
		}
		ev := evaluate(burstMatches, fs, r.burstBytes, r.criteria)
		for _, l := range ev.log {
			a.Logf("attempt %d: %s", a.N, l)
		}
		for _, f := range ev.failures {
			a.Errorf("%s", f)
		}
		if ev.stalls > 0 {
			a.Stalled("%d departure gaps longer than two frame times while frames were queued", ev.stalls)
		}
	})
}

// sendBursts sends the bursts: both senders start each burst together.
func sendBursts(t *testing.T, tx []writer, seq *uint64) {
	for b := 0; b < bursts; b++ {
		var start, done sync.WaitGroup
		start.Add(1)
		for s := range tx {
			done.Add(1)
			go func() {
				defer done.Done()
				start.Wait()
				for i := 0; i < burstLen; i++ {
					send(t, tx[s], seq)
				}
			}()
		}
		start.Done()
		done.Wait()
		time.Sleep(60 * time.Millisecond) // 50 packets drain in 6 ms
	}
}

// evaluation is the verdict on one attempt.
type evaluation struct {
	log, failures []string
	stalls        int // the port's timer stalls seen
}

// evaluate compares every departure with the port-rate prediction.
//
// The prediction. An HTB port is a FIFO drained by a token bucket of rate C
// and burst B: it sends while the bucket is not negative and then charges
// the frame, so the first floor(B/1514)+1 frames of a burst leave at once,
// and from then on one frame leaves every 1514·8/C (121.12 µs at 100 Mbit);
// a late timer is credited back by the bucket, so lateness does not
// accumulate. Hence the i-th departing packet of a backlogged burst leaves
// at
//
//	d[i] = phase + i·1514·8/C
//
// and its switch latency is d[i] - arrival[i]: the frames still ahead of it
// times the serialization time, less how long after the phase it arrived.
// The rate is not fitted; only the phase is, once per burst, as the median
// of d[i] - i·1514·8/C, because when HTB starts draining after its free
// frames is a detail of its timer.
//
// A departure gap longer than two frame times while frames are queued
// means the machine stalled the port's timer (HTB credits at most B back,
// so a long stall shifts the rest of the burst). The burst is re-phased from
// that packet on; stalls are counted, logged and bounded so they cannot hide
// a wrong measurement. The credit a stall leaves is spent at once: the
// first floor(B/1514)+1 frames after it leave back to back, as at a burst's
// start (in CI on 2026-11-28 the five frames after a 1.2 ms stall had
// residuals of 715, 599, 479, 360 and 240 µs, one frame time apart: they
// left together, not a frame time apart as predicted). Those catch-up
// departures are counted and left out of the fit and the residuals; the
// rate-limited ones after them are checked as any others.
func evaluate(ms []match, fs stats.Summary, burstBytes int, crit criteria) evaluation {
	var ev evaluation
	logf := func(f string, a ...any) { ev.log = append(ev.log, fmt.Sprintf(f, a...)) }
	failf := func(f string, a ...any) { ev.failures = append(ev.failures, fmt.Sprintf(f, a...)) }
	free := burstBytes/frameLen + 1
	var (
		residuals       []float64
		stalls, outside int
		catchUp         int
		maxQueued       float64
	)
	for _, b := range splitBursts(ms) {
		slices.SortFunc(b, func(x, y match) int { return int(x.out - y.out) }) // departure order
		if len(b) <= free+2 {
			failf("burst of %d packets is too short for HTB's %d free frames", len(b), free)
			continue
		}
		for i := 0; i < free; i++ {
			if l := float64(b[i].out - b[i].in); l > fs.P99+serialization {
				failf("burst-start packet %d: latency %.1f µs > floor p99 + one frame %.1f µs", i, l/1e3, (fs.P99+serialization)/1e3)
			}
		}
		// Each departure is predicted from the packet's own arrival and the
		// departure before it, as a wire at the port's rate sends: at once
		// on arrival (plus the floor) or one frame time after the last. A
		// port served late by its timer shifts every later departure (its
		// bucket is smaller than a frame, so it does not catch up), which a
		// prediction from the burst's start would count against them all.
		for k := free; k < len(b); k++ {
			m, prev := b[k], b[k-1]
			queued := float64(m.in)+fs.P50 < float64(prev.out)+serialization
			if gap := float64(m.out - prev.out); queued && gap > 2*serialization {
				stalls++
				catchUp++
				logf("stall: departure gap %.1f µs before departure %d", gap/1e3, k)
				continue
			}
			predicted := max(fs.P50, float64(prev.out)+serialization-float64(m.in))
			measured := float64(m.out - m.in)
			residual := measured - predicted
			allowed := 15e3 + 0.05*predicted
			if math.Abs(residual) > allowed {
				outside++
				logf("departure %d: measured %.1f µs, predicted %.1f µs, residual %.1f µs > allowed %.1f µs",
					k, measured/1e3, predicted/1e3, residual/1e3, allowed/1e3)
				if crit.oneFrameCap && math.Abs(residual) > allowed+serialization {
					failf("departure %d: residual %.1f µs is more than one frame time beyond the tolerance", k, residual/1e3)
				}
			}
			residuals = append(residuals, residual)
			maxQueued = math.Max(maxQueued, measured)
		}
	}
	checked := len(residuals)
	// At least 95% of departures within 15 µs + 5%, all within one more
	// frame time. The outliers are HTB's, not the LMM's: while the senders
	// are still enqueueing, every enqueue runs the qdisc and a frame leaves
	// the moment its tokens are there; once they stop, frames leave from
	// HTB's watchdog timer, which on this shared 2-core VM fires 10–40 µs
	// late (the bucket credits the lateness back, so it does not add up).
	// The first rate-limited departures of a burst are therefore early
	// against the burst's median phase by about that timer latency.
	if limit := int(float64(checked) * (1 - crit.within)); outside > limit {
		failf("%d of %d departures outside 15 µs + 5%% (at most %d allowed)", outside, checked, limit)
	}
	ev.stalls = stalls
	if stalls > bursts {
		failf("%d timer stalls in %d bursts: the machine is too loaded for this test to mean anything", stalls, bursts)
	}
	// The queue must really have formed: 2 senders × 25 packets means the
	// last one waits for ~40 frames even if the senders were slow.
	if maxQueued < 30*serialization {
		failf("no queue formed: deepest predicted latency %.1f µs", maxQueued/1e3)
	}
	rs := stats.Summarize(residuals)
	if crit.medianWithin > 0 && math.Abs(rs.P50) > crit.medianWithin {
		failf("median residual %.2f µs beyond ±%.0f µs", rs.P50/1e3, crit.medianWithin/1e3)
	}
	logf("%d departures checked, deepest predicted latency %.1f µs (%.1f frames); %d outside 15 µs + 5%%; %d timer stalls, "+
		"after which %d catch-up departures were not checked", checked, maxQueued/1e3, maxQueued/serialization, outside, stalls, catchUp)
	logf("residuals (measured - predicted): min %.2f µs, p50 %.2f µs, mean %.2f µs, p99 %.2f µs, max %.2f µs",
		rs.Min/1e3, rs.P50/1e3, rs.Mean/1e3, rs.P99/1e3, rs.Max/1e3)
	return ev
}

// splitBursts groups matches (sorted by arrival) into bursts separated by
// idle gaps of more than 20 ms.
func splitBursts(ms []match) [][]match {
	slices.SortFunc(ms, func(x, y match) int { return int(x.in - y.in) })
	var out [][]match
	for i, m := range ms {
		if i == 0 || m.in-ms[i-1].in > 20e6 {
			out = append(out, nil)
		}
		out[len(out)-1] = append(out[len(out)-1], m)
	}
	return out
}

// send writes one full-size probe whose payload starts with a sequence
// number, so every packet's UDP payload hash differs.
func send(t *testing.T, w writer, seq *uint64) {
	var payload [1472]byte
	binary.BigEndian.PutUint64(payload[:], sequence(seq))
	if _, err := w.Write(payload[:]); err != nil {
		t.Error(err)
	}
}

var seqMu sync.Mutex

func sequence(seq *uint64) uint64 {
	seqMu.Lock()
	defer seqMu.Unlock()
	*seq++
	return *seq
}

// measure captures the router's sender-facing ports (in) and its shaped
// port (out) while traffic runs, then matches the probes with the LMM.
func measure(t *testing.T, r rig, traffic func(seq *uint64)) []match {
	t.Helper()
	dir := t.TempDir()
	ctx := context.Background()
	filter := capture.Filter{UDPOnly: true, DstPort: probePort}
	var ingress []string
	var sessions []*capture.Session
	for _, p := range r.ingress {
		filter.Direction = capture.In
		s, err := capture.Start(ctx, p, dir, capture.Options{Filter: filter})
		if err != nil {
			t.Fatal(err)
		}
		sessions = append(sessions, s)
		ingress = append(ingress, s.File())
	}
	filter.Direction = capture.Out
	out, err := capture.Start(ctx, r.egress, dir, capture.Options{Filter: filter})
	if err != nil {
		t.Fatal(err)
	}
	sessions = append(sessions, out)
	var seq uint64
	traffic(&seq)
	time.Sleep(30 * time.Millisecond)
	for _, s := range sessions {
		st, err := s.Stop()
		if err != nil {
			t.Fatal(err)
		}
		if st.Drops != 0 {
			t.Fatalf("capture %s dropped %d packets", st.Label, st.Drops)
		}
	}
	var csv bytes.Buffer
	pw, err := lmm.NewPacketWriter(&csv)
	if err != nil {
		t.Fatal(err)
	}
	res, err := lmm.MatchFiles(ingress, out.File(), lmm.Config{
		Mode: lmm.Probes, Probe: lmm.ProbeSelector{DstPort: probePort}, Packets: pw,
	})
	if err != nil {
		t.Fatal(err)
	}
	c := res.Counts
	if c.Unmatched != 0 || c.EgressOnly != 0 || c.Duplicates != 0 || c.Reordered != 0 || c.Matched != int64(seq) {
		t.Fatalf("sent %d probes; LMM counts %+v (files in %s)", seq, c, filepath.Base(dir))
	}
	var ms []match
	sc := bufio.NewScanner(&csv)
	sc.Scan() // header
	for sc.Scan() {
		f := strings.SplitN(sc.Text(), ",", 3)
		in, _ := strconv.ParseInt(f[0], 10, 64)
		o, _ := strconv.ParseInt(f[1], 10, 64)
		ms = append(ms, match{in, o})
	}
	return ms
}
