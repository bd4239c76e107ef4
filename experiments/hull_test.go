package experiments_test

// The checks of issue 5 against HULL ("Less is More", Table 1 and §6.1),
// on a star lab scaled from the paper's 1 Gbit to 100 Mbit (what the 2-core
// CI machine carries with captures running). By fabric's scaling rule,
// times scale by that factor and bytes are kept: DCTCP's K stays 30 KB.
//
// At 1 Gbit (FABRIC_HULL_RATE_MBIT=1000, by hand) this machine's CPU is
// the bottleneck (measured: 9% idle, drop-tail TCP's mean queue 8.7 KB, so
// the Table 1 contrast disappears), which is why CI runs 100 Mbit.
//
// Every scenario has a round-trip time: each host link carries hullRTT/2
// of delay from the switch to the host (a round trip crosses two such
// directions, data to h2 and ACKs back to h0/h1; the lab's delay lines,
// tc/delay): every packet then passes one delay line, not two, which
// halves the lines' CPU. Without it the min RTT
// was 9–40 µs and two flows at DCTCP's 2-segment floor overfilled the
// path, so the phantom queue could not leave headroom at all (§6.1 needs
// the flows' windows to fit below the drain rate) and the pacer only
// delayed window-limited flows. The paper does not state its testbed's
// RTT; 200 µs at 1 Gbit (a bandwidth-delay product of 17 frames), scaled
// by 10 like every other time here, gives 2 ms. Measured with this test
// at 100 Mbit, 2026-11-25 (throughput in Mbit/s, mean / p99 switch
// latency; the paper's Table 1 at 1 Gbit has DCTCP-30K at 153.9 µs mean,
// 1539 µs at this scale, and §6.1 ~870 of 950 Mbit/s for PQ950):
//
//	TCP-DropTail  DCTCP-30K           DCTCP-PQ950        PQ950 + pacer
//	95.8, 49953   95.6, 2179 / 2719   84.0, 1.9 / 25.5   83.5, 1.2 / 2.2
//
// Each scenario builds its own star lab (h0, h1 → s0 → h2), runs two
// long-lived flows into h2, captures s0's ingress ports (from h0, h1) and
// its egress port (to h2), and measures every data packet's switch latency
// with the LMM.

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fabric-emu/fabric/emu/emutest"
	"github.com/fabric-emu/fabric/hosts/cc"
	"github.com/fabric-emu/fabric/internal/testenv"
	"github.com/fabric-emu/fabric/results/capture"
	"github.com/fabric-emu/fabric/results/lmm"
	"github.com/fabric-emu/fabric/tc"
	"github.com/fabric-emu/fabric/tc/pacer"
)

// hullRateMbit is the line rate: 100 Mbit in CI, where captures share the
// 2 cores with the flows; FABRIC_HULL_RATE_MBIT=1000 runs the paper's rate
// by hand. Every threshold below scales with it.
var hullRateMbit = envFloat("FABRIC_HULL_RATE_MBIT", 100)

// hullRTT is every scenario's round-trip time: 200 µs at 1 Gbit, scaled
// with the rate (see the top of the file); FABRIC_HULL_RTT_US overrides it
// by hand.
var hullRTT = time.Duration(envFloat("FABRIC_HULL_RTT_US", 200*1000/hullRateMbit)) * time.Microsecond

const (
	hullWarmup  = 1500 * time.Millisecond
	hullMeasure = 3 * time.Second
	hullPort    = 5201
)

type hullScenario struct {
	short   string // lab name suffix
	label   string // table row
	cc      string
	marking string // YAML flow map for ports.marking; "" for drop-tail
	buffer  string
	pacer   bool
}

type hullResult struct {
	label         string
	mbps          float64
	perFlow       [2]float64
	meanUS, p99US float64
	counts        lmm.Counts
	cpuIdle       float64 // fraction of the machine's CPU idle during the run
	cpuSteal      float64 // percent of it the hypervisor took
	pacerStats    []pacer.Stats
	associated    int
	backlogKB     float64       // mean real backlog of the port, sampled
	minRTT        time.Duration // smallest min_rtt of the two senders
	lineLateP99   time.Duration // the delay lines' p99 lateness
}

// Paper figures (HULL Table 1 and §6.1, 1 Gbit testbed) for the log table.
var hullPaper = map[string]string{
	"TCP-DropTail":      "982 Mbps, mean 1100.6 µs, p99 4308.8 µs",
	"DCTCP-30K":         "975 Mbps, mean 153.9 µs, p99 305.8 µs",
	"DCTCP-PQ950":       "~870 Mbps (§6.1; with pacer)",
	"DCTCP-PQ950-Pacer": "~870 Mbps (§6.1)",
}

func TestHULLPaperChecks(t *testing.T) {
	testenv.RequireRoot(t)
	release, info, err := cc.Ensure(context.Background(), cc.DCTCP)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	t.Logf("DCTCP: %s", info)

	kBytes := 30e3
	scenarios := hullScenarios(info.Name, kBytes)
	// The four runs share a machine: a stall longer than half the RTT
	// (a flow's reaction time) changes the queues they build, and the
	// set runs again only after one the attempt measured.
	testenv.Retry(t, 2, hullRTT/2, func(a *testenv.Attempt) {
		res := map[string]hullResult{}
		repairs0, _ := cc.KernelBugRepairs()
		for _, sc := range scenarios {
			r := runHULL(t, sc)
			res[sc.label] = r
			// A trial's limit (docs/design.md): 10 % of the delay, 50 µs at least.
			if limit := max(hullRTT/20, 50*time.Microsecond); r.lineLateP99 > limit {
				a.Stalled("%s: the delay lines were %v late at p99 (limit %v)", sc.label, r.lineLateP99, limit)
			}
			a.Logf("%-18s %6.1f Mbit/s (flows %.1f + %.1f)  mean %7.1f µs  p99 %7.1f µs  mean backlog %.1f KB  matched %d unmatched %d egress-only %d  CPU idle %.0f%%, stolen %.1f%%",
				r.label, r.mbps, r.perFlow[0], r.perFlow[1], r.meanUS, r.p99US, r.backlogKB, r.counts.Matched, r.counts.Unmatched, r.counts.EgressOnly, 100*r.cpuIdle, r.cpuSteal)
		}
		var table strings.Builder
		fmt.Fprintf(&table, "\n| scheme | throughput (%g Mbit line) | mean / p99 switch latency | paper (1 Gbit) |\n|---|---|---|---|\n", hullRateMbit)
		for _, sc := range scenarios {
			r := res[sc.label]
			fmt.Fprintf(&table, "| %s | %.1f Mbit/s | %.1f / %.1f µs | %s |\n", r.label, r.mbps, r.meanUS, r.p99US, hullPaper[r.label])
		}
		a.Logf("%s", table.String())
		if repairs, err := cc.KernelBugRepairs(); err == nil {
			// Registrations that ended meanwhile take their counts with them.
			a.Logf("DCTCP values repaired after lost struct_ops return values (hosts/cc README): %d", repairs-min(repairs0, repairs))
		}
		judgeHULL(a, res, kBytes)
	})
}

// judgeHULL checks Table 1's and §6.1's orderings. Throughputs are judged
// against the same run's drop-tail TCP, which fills the line (Table 1: 982
// of 1000 Mbit/s), not against a floor that this machine's CPU decides:
// the absolute figures are BenchmarkHULL's.
func judgeHULL(a *testenv.Attempt, res map[string]hullResult, kBytes float64) {
	tcp, dctcp, pq, pqp := res["TCP-DropTail"], res["DCTCP-30K"], res["DCTCP-PQ950"], res["DCTCP-PQ950-Pacer"]
	// Table 1: drop-tail TCP queues several times longer than DCTCP.
	if tcp.meanUS < 3*dctcp.meanUS {
		a.Errorf("TCP drop-tail mean latency %.1f µs is not several times DCTCP-K's %.1f µs", tcp.meanUS, dctcp.meanUS)
	}
	// Table 1: DCTCP keeps TCP's throughput (975 against 982 Mbit/s); 10 %
	// less is the sawtooth of two flows cut by α/2 at most every RTT.
	if dctcp.mbps < 0.9*tcp.mbps {
		a.Errorf("DCTCP-K throughput %.1f Mbit/s < 90%% of drop-tail TCP's %.1f", dctcp.mbps, tcp.mbps)
	}
	// The checks below need flows that can send less than the path holds:
	// two flows at DCTCP's 2-segment floor within the bandwidth-delay
	// product, which the lab's RTT provides. A path too short for that
	// (a broken delay line, or FABRIC_HULL_ACK_DELAY_US=0.001 by hand) is
	// a failure, not a reason to skip them.
	const floorBytes = 2 * 2 * 1514.0
	minRTT := min(dctcp.minRTT, pq.minRTT)
	if bdp := hullRateMbit * 1e6 / 8 * minRTT.Seconds(); floorBytes > bdp {
		a.Errorf("2 flows × 2 segments = %.0f B exceed the path's BDP %.0f B (min RTT %v at %v Mbit/s, want %v): the headroom checks cannot hold",
			floorBytes, bdp, minRTT, hullRateMbit, hullRTT)
	}
	// DCTCP holds the queue near K: its mean is at most K plus the
	// oscillation, which is below K for two flows (Alizadeh et al. §3.3:
	// amplitude ½√(2N(C·RTT+K)) packets, 9 frames here), so 2K.
	if nearK := 2 * kBytes * 8 / hullRateMbit; dctcp.meanUS > nearK {
		a.Errorf("DCTCP-K mean switch latency %.1f µs, want near K (≤ %.0f µs)", dctcp.meanUS, nearK)
	}
	// §6.1: the phantom queue gives lower latency than DCTCP-K ...
	if pq.meanUS >= dctcp.meanUS {
		a.Errorf("DCTCP-PQ950 mean latency %.1f µs is not below DCTCP-K's %.1f µs", pq.meanUS, dctcp.meanUS)
	}
	// ... by leaving headroom: marked whenever the line runs above γ = 95 %,
	// the flows stay below it (1 % for the throughput's measurement over
	// 3 s), yet keep most of what DCTCP-K carries (§6.1: ~870 against 975
	// Mbit/s; half fails a phantom queue that starves its flows).
	if pq.mbps > 0.96*tcp.mbps || pq.mbps < 0.5*dctcp.mbps {
		a.Errorf("DCTCP-PQ950 throughput %.1f Mbit/s, want below 96%% of drop-tail TCP's %.1f and above half DCTCP-K's %.1f", pq.mbps, tcp.mbps, dctcp.mbps)
	}
	// With the pacer the phantom queue still keeps the switch far emptier
	// than DCTCP-K's threshold does (Table 4's ordering: 7.0 against 78.3
	// µs at 40 % load). Whether the pacer lowers the unpaced PQ's latency,
	// as HULL's pacer does by smoothing its NICs' offload bursts (§4), is
	// open here: fabric's hosts send without offloads, so there are no
	// offload bursts to smooth, and the paced mean came out within 10 % of
	// the unpaced one (1.06× in one run); the comparison is logged, not
	// judged, until issue 39 settles what HULL's pacer should do here.
	a.Logf("the pacer's switch latency against the unpaced PQ's: %.1f against %.1f µs (%.2f×)", pqp.meanUS, pq.meanUS, pqp.meanUS/pq.meanUS)
	if pqp.meanUS >= dctcp.meanUS {
		a.Errorf("with the pacer mean latency %.1f µs, not below DCTCP-K's %.1f µs", pqp.meanUS, dctcp.meanUS)
	}
	if pqp.mbps < 0.8*pq.mbps {
		a.Errorf("with the pacer %.1f Mbit/s, without %.1f Mbit/s (want ≥ 80%%)", pqp.mbps, pq.mbps)
	}
	if pqp.associated < 1 {
		a.Errorf("no flow associated with the pacers during the run: %+v", pqp.pacerStats)
	}
}

// hullScenarios are Table 1's and §6.1's four schemes with DCTCP's
// registered name dctcp and threshold kBytes. K = 30 KB (Table 1) is kept:
// fabric's scaling rule scales times and keeps bytes (docs/design.md), and
// with the RTT scaled by the same factor as the rate, the bandwidth-delay
// product in bytes is the paper's. The phantom threshold keeps §6.1's
// 1 KB for the same reason.
func hullScenarios(dctcp string, kBytes float64) []hullScenario {
	pqMarking := "{phantom: {drain: 0.95, threshold: 1KB}}"
	return []hullScenario{
		{short: "tcp", label: "TCP-DropTail", cc: "cubic", buffer: "700KB"},
		{short: "k3", label: "DCTCP-30K", cc: dctcp, buffer: "700KB", marking: fmt.Sprintf("{ecn: {threshold: %.0fB}}", kBytes)},
		// HULL §6.1: phantom queue draining at 95% of the line rate.
		{short: "pq", label: "DCTCP-PQ950", cc: dctcp, buffer: "700KB", marking: pqMarking},
		{short: "pqp", label: "DCTCP-PQ950-Pacer", cc: dctcp, buffer: "700KB", marking: pqMarking, pacer: true},
	}
}

// BenchmarkHULL runs TestHULLPaperChecks' four schemes once and reports
// their throughput and switch latency: the absolute figures the test
// leaves to the machine. Targets (HULL Table 1 and §6.1, at this scale):
// DCTCP-30K ≥ 85 % of the line (975 of 1000 Mbit/s), DCTCP-PQ950 60–95 %
// (~870 of 1000 with its pacer), PQ950's mean latency a few µs.
func BenchmarkHULL(b *testing.B) {
	testenv.RequireRoot(b)
	release, info, err := cc.Ensure(context.Background(), cc.DCTCP)
	if err != nil {
		b.Fatal(err)
	}
	defer release()
	for range b.N {
		cpu0 := testenv.ReadCPU(b)
		for _, sc := range hullScenarios(info.Name, 30e3) {
			r := runHULL(b, sc)
			b.ReportMetric(100*r.mbps/hullRateMbit, sc.short+"-%line")
			b.ReportMetric(r.meanUS, sc.short+"-mean-µs")
		}
		cpu, _ := testenv.ReadCPU(b).Since(cpu0)
		b.ReportMetric(cpu.StealPct, "steal-%")
	}
}

func runHULL(t testing.TB, sc hullScenario) hullResult {
	t.Helper()
	ctx := context.Background()
	name := emutest.Name("th" + sc.short)
	ports := "buffer: " + sc.buffer
	if sc.marking != "" {
		ports += "\n  marking: " + sc.marking
	}
	// The senders' pacers come from the lab file, as a user would set them.
	hostPacer := ""
	if sc.pacer {
		hostPacer = "\n  pacer: {}\n  overrides: {h2: {pacer: {enabled: false}}}"
	}
	lab := emutest.Up(t, fmt.Sprintf(`name: %s
topology: {kind: star, hosts: 3}
links: {rate: %gMbit, delay: {down: %dus}}
hosts:
  sysctls: {net.ipv4.tcp_ecn: "1"}%s
ports:
  %s
`, name, hullRateMbit, hullRTT.Microseconds()/2, hostPacer, ports))
	// Down when this scenario ends, not when the test does: a lab left up
	// keeps its delay-line loop on the CPU the next scenario's lines use.
	defer func() {
		if err := lab.Down(context.Background()); err != nil {
			t.Errorf("lab %s down: %v", name, err)
		}
	}()

	r := hullResult{label: sc.label}
	var pacers []*pacer.Pacer
	for _, h := range []string{"h0", "h1"} {
		if p := lab.Pacers()[h]; p != nil {
			pacers = append(pacers, p)
		}
	}
	if sc.pacer && len(pacers) != 2 {
		t.Fatalf("lab runs pacers on %v, want h0 and h1", lab.Pacers())
	}

	// Receiver: h2 accepts both flows and counts their bytes.
	dst := lab.Graph.Node("h2").Addr
	var ln net.Listener
	if err := lab.Do("h2", func() error {
		var err error
		lc := net.ListenConfig{Control: setCC(sc.cc)}
		ln, err = lc.Listen(ctx, "tcp4", net.JoinHostPort(dst.String(), strconv.Itoa(hullPort)))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var got [2]atomic.Int64
	var wg sync.WaitGroup
	accepted := make(chan error, 2)
	go func() {
		for i := range 2 {
			c, err := ln.Accept()
			if err != nil {
				accepted <- err
				return
			}
			accepted <- nil
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				buf := make([]byte, 256<<10)
				for {
					n, err := c.Read(buf)
					got[i].Add(int64(n))
					if err != nil {
						return
					}
				}
			}()
		}
	}()

	// Senders: h0 and h1, one long-lived flow each.
	stop := make(chan struct{})
	var senders sync.WaitGroup
	var conns []*net.TCPConn
	for _, h := range []string{"h0", "h1"} {
		var c net.Conn
		if err := lab.Do(h, func() error {
			var err error
			d := net.Dialer{Control: setCC(sc.cc), Timeout: 5 * time.Second}
			c, err = d.Dial("tcp4", net.JoinHostPort(dst.String(), strconv.Itoa(hullPort)))
			return err
		}); err != nil {
			t.Fatalf("%s: %v", h, err)
		}
		if err := <-accepted; err != nil {
			t.Fatal(err)
		}
		if name, err := socketCC(c.(*net.TCPConn)); err != nil || name != sc.cc {
			t.Fatalf("%s: socket uses %q (%v), want %q", h, name, err, sc.cc)
		}
		conns = append(conns, c.(*net.TCPConn))
		senders.Add(1)
		go func() {
			defer senders.Done()
			defer c.Close()
			buf := make([]byte, 64<<10)
			for {
				select {
				case <-stop:
					return
				default:
				}
				c.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
				if _, err := c.Write(buf); err != nil && !os.IsTimeout(err) {
					return
				}
			}
		}()
	}
	defer func() {
		close(stop)
		senders.Wait()
		wg.Wait()
	}()

	time.Sleep(hullWarmup)
	dir := t.TempDir()
	s0, _ := lab.NetNS("s0")
	var ins []*capture.Session
	for _, ifname := range []string{"eth0", "eth1"} {
		s, err := capture.Start(ctx, capture.Point{NetNS: s0, Ifname: ifname, Label: "s0:" + ifname}, dir,
			capture.Options{Filter: capture.Filter{Direction: capture.In, IPv4Only: true}})
		if err != nil {
			t.Fatal(err)
		}
		ins = append(ins, s)
	}
	out, err := capture.Start(ctx, capture.Point{NetNS: s0, Ifname: "eth2", Label: "s0:eth2"}, dir,
		capture.Options{Filter: capture.Filter{Direction: capture.Out, IPv4Only: true}})
	if err != nil {
		t.Fatal(err)
	}
	cpu0 := testenv.ReadCPU(t)
	b0 := [2]int64{got[0].Load(), got[1].Load()}
	t0 := time.Now()
	// Sample the real backlog of the port under test: with it, a latency
	// the queue cannot explain shows up as CPU scheduling delay.
	tgt, err := lab.PortTarget("s0", "eth2")
	if err != nil {
		t.Fatal(err)
	}
	// The pacers' associated flows are counted at every sample, and the
	// most kept: an association ends when its flow goes T_i without a
	// mark, so a single look can find none (CI, 2026-11-27: 0 at the
	// midpoint of a run whose pacers had associated 7 times).
	var backlogSum, backlogN float64
	sample := func(until time.Time) {
		for time.Now().Before(until) {
			if ps, err := tc.Stats(ctx, tgt); err == nil {
				backlogSum += float64(ps.Backlog)
				backlogN++
			}
			assoc := 0
			for _, p := range pacers {
				n, err := p.Associated()
				if err != nil {
					t.Fatal(err)
				}
				assoc += n
			}
			r.associated = max(r.associated, assoc)
			time.Sleep(20 * time.Millisecond)
		}
	}
	sample(t0.Add(hullMeasure))
	b1 := [2]int64{got[0].Load(), got[1].Load()}
	elapsed := time.Since(t0)
	cpu, _ := testenv.ReadCPU(t).Since(cpu0)
	r.cpuIdle, r.cpuSteal = cpu.IdlePct/100, cpu.StealPct
	var ingress []string
	for _, s := range append(ins, out) {
		st, err := s.Stop()
		if err != nil {
			t.Fatal(err)
		}
		if st.Drops != 0 {
			t.Errorf("%s: capture dropped %d packets; latency figures incomplete", st.Label, st.Drops)
		}
	}
	for _, s := range ins {
		ingress = append(ingress, s.File())
	}
	for i := range 2 {
		r.perFlow[i] = float64(b1[i]-b0[i]) * 8 / elapsed.Seconds() / 1e6
		r.mbps += r.perFlow[i]
	}
	for _, p := range pacers {
		s, err := p.Stats()
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Err(); err != nil {
			t.Error(err)
		}
		r.pacerStats = append(r.pacerStats, s)
		t.Logf("%s pacer: %+v", sc.label, s)
	}
	r.backlogKB = backlogSum / max(backlogN, 1) / 1000
	if st, err := lab.DelayLoop().Stats(); err == nil {
		r.lineLateP99 = st.Lateness(0.99)
		t.Logf("%s: RTT %v from the lab's delay lines: %+v, lateness p99 %v, max %v", sc.label, hullRTT, st.Totals(), st.Lateness(0.99), st.MaxLateness())
	}
	for i, c := range conns {
		if ti, err := tcpInfo(c); err == nil {
			if rtt := time.Duration(ti.Min_rtt) * time.Microsecond; r.minRTT == 0 || rtt < r.minRTT {
				r.minRTT = rtt
			}
			t.Logf("%s flow %d: cwnd %d ssthresh %d rtt %d µs min_rtt %d µs, ECE on %d of %d delivered, retrans %d, options %#x",
				sc.label, i, ti.Snd_cwnd, ti.Snd_ssthresh, ti.Rtt, ti.Min_rtt, ti.Delivered_ce, ti.Delivered, ti.Total_retrans, ti.Options)
		}
	}
	{
		if ps, err := tc.Stats(ctx, tgt); err == nil {
			logMarker := func(kind string, m *tc.MarkerStats) {
				if m != nil {
					t.Logf("%s %s marker: %d packets, %d ECT, %d marked, vq max %d B", sc.label, kind, m.Packets, m.ECT, m.Marks, m.VQMax)
				}
			}
			t.Logf("%s port s0:eth2: %d packets, %d drops, backlog %d B", sc.label, ps.Packets, ps.Drops, ps.Backlog)
			logMarker("ECN", ps.ECN)
			logMarker("phantom", ps.Phantom)
		}
	}
	m, err := lmm.MatchFiles(ingress, out.File(), lmm.Config{Mode: lmm.AllPackets})
	if err != nil {
		t.Fatal(err)
	}
	r.counts = m.Counts
	r.meanUS, r.p99US = m.NS.Mean/1e3, m.NS.P99/1e3
	if m.Counts.Matched < 1000 {
		t.Fatalf("%s: only %d packets matched across the switch: %+v", sc.label, m.Counts.Matched, m.Counts)
	}
	return r
}

func envFloat(name string, def float64) float64 {
	if v, err := strconv.ParseFloat(os.Getenv(name), 64); err == nil && v > 0 {
		return v
	}
	return def
}

func setCC(name string) func(string, string, syscall.RawConn) error {
	return func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, name)
		}); err != nil {
			return err
		}
		return serr
	}
}

func tcpInfo(c *net.TCPConn) (*unix.TCPInfo, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var ti *unix.TCPInfo
	var gerr error
	rc.Control(func(fd uintptr) {
		ti, gerr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	})
	return ti, gerr
}

func socketCC(c *net.TCPConn) (string, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return "", err
	}
	var name string
	var gerr error
	rc.Control(func(fd uintptr) {
		name, gerr = unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION)
	})
	return strings.TrimRight(name, "\x00"), gerr
}
