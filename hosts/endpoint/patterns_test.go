package endpoint

import (
	"encoding/binary"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"fabric/emu"
	"fabric/internal/records"
	"fabric/internal/testenv"
)

// TestIncast: 8 workers answer an aggregator at once on a 100 Mbit star,
// for R rounds; every query is recorded with its completion time, which
// cannot beat the receiver's link (8 × 64 KB at 100 Mbit = 41 ms).
func TestIncast(t *testing.T) {
	testenv.RequireRoot(t)
	lab := upLab(t, "name: "+labName("inc")+"\ntopology: {kind: star, hosts: 9}\nlinks: {rate: 100Mbit}\n")
	run := t.TempDir()
	workers := []string{"h1", "h2", "h3", "h4", "h5", "h6", "h7", "h8"}
	var servers []*proc
	for _, h := range workers {
		servers = append(servers, start(t, lab, h, "server", "--host", h, "--run-dir", run))
	}
	const rounds, size = 20, 64000
	agg := start(t, lab, "h0", append([]string{"incast", "--host", "h0", "--run-dir", run, "--size", "64KB",
		"--rounds", strconv.Itoa(rounds), "--gap", "20ms"}, peersArgs(lab, workers...)...)...)
	agg.wait(60 * time.Second)
	for _, s := range servers {
		s.stop()
	}
	set := readRecords(t, run)
	if len(set.Queries) != rounds {
		t.Fatalf("%d queries recorded, want %d\n%s", len(set.Queries), rounds, agg.logText())
	}
	ideal := float64(len(workers)*size*8) / 100e6 * 1e9
	var qct []float64
	for _, q := range set.Queries {
		if q.Aggregator != "h0" || q.Workers != 8 || q.Size != size {
			t.Fatalf("bad query %+v", q)
		}
		// The query ends with its last response.
		var srcs []string
		var last int64
		for _, f := range set.Flows {
			if f.StartNS == q.StartNS {
				srcs = append(srcs, f.Src)
				last = max(last, f.EndNS)
				if f.Bytes != size || f.Pattern != "incast" || f.Dst != "h0" {
					t.Fatalf("bad response %+v", f)
				}
			}
		}
		slices.Sort(srcs)
		if !slices.Equal(srcs, workers) || last != q.EndNS {
			t.Fatalf("query %d: responses from %v ending %d, query ends %d", q.ID, srcs, last, q.EndNS)
		}
		d := float64(q.EndNS - q.StartNS)
		qct = append(qct, d)
		if d < 0.9*ideal {
			t.Errorf("query completed in %.1f ms, faster than the 100 Mbit link allows (%.1f ms)", d/1e6, ideal/1e6)
		}
	}
	sort.Float64s(qct)
	t.Logf("%d queries of 8 × 64 KB: QCT min %.1f ms, median %.1f ms, max %.1f ms (line-rate bound %.1f ms)",
		len(qct), qct[0]/1e6, qct[len(qct)/2]/1e6, qct[len(qct)-1]/1e6, ideal/1e6)
	t.Logf("sample records:\n%s", sampleLines(t, run, records.FileName("h0.incast"), 3))
}

// TestPermutation runs the permutation pattern on a k=4 fat tree: every
// host sends one long-lived flow along a derangement and receives exactly
// one, and each flow is sampled every 100 ms.
func TestPermutation(t *testing.T) {
	testenv.RequireRoot(t)
	// 16 flows over up to 5 hops: 10 Mbit links keep the 2-core machine
	// ahead of the traffic.
	lab := upLab(t, "name: "+labName("perm")+"\ntopology: {kind: fattree, k: 4}\nlinks: {rate: 10Mbit}\n")
	run := t.TempDir()
	var hosts []string
	for _, h := range lab.Graph.Hosts() {
		hosts = append(hosts, h.Name)
	}
	if len(hosts) != 16 {
		t.Fatalf("k=4 fat tree has %d hosts", len(hosts))
	}
	perm := Derangement(len(hosts), 1)
	var servers []*proc
	for _, h := range hosts {
		servers = append(servers, start(t, lab, h, "server", "--host", h, "--run-dir", run))
	}
	const duration = 5 * time.Second
	var clients []*proc
	for i, h := range hosts {
		clients = append(clients, start(t, lab, h, append([]string{"permutation", "--host", h, "--run-dir", run,
			"--duration", duration.String()}, peersArgs(lab, hosts[perm[i]])...)...))
	}
	for _, c := range clients {
		c.wait(duration + 30*time.Second)
	}
	for _, s := range servers {
		s.stop()
	}
	set := readRecords(t, run)
	sends, recvs := map[string]int{}, map[string]int{}
	var total float64
	for _, f := range set.Flows {
		if f.Pattern != "permutation" {
			t.Fatalf("bad flow %+v", f)
		}
		sends[f.Src]++
		recvs[f.Dst]++
		if want := hosts[perm[slices.Index(hosts, f.Src)]]; f.Dst != want {
			t.Errorf("flow %s→%s, the derangement says %s→%s", f.Src, f.Dst, f.Src, want)
		}
		mbps := float64(f.Bytes) * 8 / float64(f.EndNS-f.StartNS) * 1e3
		total += mbps
		// Samples: every ~100 ms, cumulative bytes never decreasing.
		var ts, bs []int64
		for _, s := range set.Samples {
			if s.FlowID == f.ID {
				ts, bs = append(ts, s.TNS), append(bs, s.Bytes)
			}
		}
		if len(ts) < 40 || !slices.IsSorted(ts) || !slices.IsSorted(bs) || bs[len(bs)-1] != f.Bytes {
			t.Errorf("flow %s→%s: %d samples (want ≥ 40 in 5 s, sorted, ending at %d bytes): last %v", f.Src, f.Dst, len(ts), f.Bytes, bs[max(0, len(bs)-3):])
			continue
		}
		if gap := float64(ts[len(ts)-2]-ts[0]) / float64(len(ts)-2) / 1e6; gap < 90 || gap > 115 {
			t.Errorf("flow %s→%s: mean sampling interval %.1f ms, want 100", f.Src, f.Dst, gap)
		}
	}
	for _, h := range hosts {
		if sends[h] != 1 || recvs[h] != 1 {
			t.Errorf("host %s sent %d and received %d flows, want 1 and 1", h, sends[h], recvs[h])
		}
	}
	t.Logf("%d flows, %d samples; mean per-flow throughput %.2f Mbit/s on 10 Mbit links", len(set.Flows), len(set.Samples), total/float64(len(set.Flows)))
	t.Logf("sample records:\n%s", sampleLines(t, run, records.FileName(hosts[0]+".server"), 2))
}

// TestProbe: a 1500-byte packet every 1 ms, each recorded at the receiver
// with its one-way delay and the DSCP it arrived with.
func TestProbe(t *testing.T) {
	testenv.RequireRoot(t)
	lab := upLab(t, "name: "+labName("prb")+"\ntopology: {kind: star, hosts: 2}\nlinks: {rate: 100Mbit}\n")
	run := t.TempDir()
	srv := start(t, lab, "h1", "server", "--host", "h1", "--run-dir", run)
	time.Sleep(300 * time.Millisecond) // probes sent before the server listens are lost, like any packet
	cl := start(t, lab, "h0", append([]string{"probe", "--host", "h0", "--run-dir", run, "--duration", "2s", "--dscp", "CS5"}, peersArgs(lab, "h1")...)...)
	cl.wait(20 * time.Second)
	time.Sleep(100 * time.Millisecond)
	srv.stop()
	set := readRecords(t, run)
	n := len(set.Probes)
	// The sender restarts its schedule after a stall rather than burst,
	// so a busy machine loses some probes; far fewer means pacing broke.
	if n < 1700 || n > 2010 {
		t.Fatalf("%d probes in 2 s at 1 ms, want ~2000", n)
	}
	var delays []int64
	seqs := map[uint64]bool{}
	for _, p := range set.Probes {
		if p.Src != "h0" || p.Dst != "h1" || p.DSCP != 40 || seqs[p.Seq] {
			t.Fatalf("bad probe %+v", p)
		}
		seqs[p.Seq] = true
		delays = append(delays, p.RecvNS-p.SendNS)
	}
	slices.Sort(delays)
	if delays[0] <= 0 || delays[len(delays)/2] > int64(time.Millisecond) {
		t.Errorf("one-way delay min %d ns, median %d ns on an idle 2-hop path", delays[0], delays[len(delays)/2])
	}
	first, last := set.Probes[0].SendNS, set.Probes[n-1].SendNS
	t.Logf("%d probes, mean interval %.3f ms, one-way delay min %.1f µs median %.1f µs p99 %.1f µs",
		n, float64(last-first)/float64(n-1)/1e6, float64(delays[0])/1e3, float64(delays[n/2])/1e3, float64(delays[n*99/100])/1e3)
	t.Logf("sample records:\n%s", sampleLines(t, run, records.FileName("h1.server"), 2))
}

// TestDSCPAndECNOnTheWire captures the responses arriving at a dynamic
// client: small responses carry CS7 and large ones CS0, as the size rule
// asks, and with --ecn on the kernel marks the data packets ECT while the
// engine keeps the ECN bits of its TOS clear.
func TestDSCPAndECNOnTheWire(t *testing.T) {
	testenv.RequireRoot(t)
	lab := upLab(t, "name: "+labName("dscp")+"\ntopology: {kind: star, hosts: 3}\nlinks: {rate: 100Mbit}\n")
	run := t.TempDir()
	cdf := t.TempDir() + "/two.cdf"
	writeFile(t, cdf, "# discrete: true\n1000 0.5\n200000 1\n")
	cap := capture(t, lab, "h0")
	var servers []*proc
	for _, h := range []string{"h1", "h2"} {
		servers = append(servers, start(t, lab, h, "server", "--host", h, "--run-dir", run))
	}
	cl := start(t, lab, "h0", append([]string{"dynamic", "--host", "h0", "--run-dir", run, "--workload", cdf,
		"--load", "0.2", "--link-rate", "100Mbit", "--duration", "3s", "--dscp-below", "10KB=CS7", "--ecn", "on", "--conns", "2"},
		peersArgs(lab, "h1", "h2")...)...)
	cl.wait(30 * time.Second)
	for _, s := range servers {
		s.stop()
	}
	byTOS, retrans := cap.stop()
	set := readRecords(t, run)
	for _, f := range set.Flows {
		want := uint8(0)
		if f.Size < 10000 {
			want = 56
		}
		if f.DSCP != want {
			t.Fatalf("flow of %d bytes recorded with DSCP %d, want %d", f.Size, f.DSCP, want)
		}
	}
	var cs7, cs0, notECT int
	for tos, n := range byTOS {
		switch {
		case tos>>2 == 56:
			cs7 += n
		case tos>>2 == 0:
			cs0 += n
		default:
			t.Errorf("%d data packets with DSCP %d", n, tos>>2)
		}
		if tos&3 == 0 {
			notECT += n
		}
	}
	t.Logf("new data segments to the client by TOS byte: %v (CS7 %d, CS0 %d, not ECN-capable %d), %d retransmissions; %d flows", byTOS, cs7, cs0, notECT, retrans, len(set.Flows))
	if cs7 == 0 || cs0 == 0 {
		t.Errorf("want data packets in both classes, got CS7 %d, CS0 %d", cs7, cs0)
	}
	if notECT != 0 {
		t.Errorf("%d data packets without ECT although the client asked for ECN", notECT)
	}
}

// capturer counts TCP data packets arriving in a host namespace by their
// TOS byte, with a raw AF_PACKET socket opened inside it.
type capturer struct {
	fd      int
	mu      sync.Mutex
	tos     map[uint8]int     // new data segments by TOS byte
	high    map[string]uint32 // highest sequence end per connection
	retrans int
	done    chan struct{}
}

func capture(t *testing.T, lab *emu.Lab, node string) *capturer {
	t.Helper()
	c := &capturer{tos: map[uint8]int{}, high: map[string]uint32{}, done: make(chan struct{})}
	proto := int(htons(unix.ETH_P_IP))
	err := lab.Do(node, func() error {
		var err error
		c.fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM, proto)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	tv := unix.NsecToTimeval(int64(100 * time.Millisecond))
	unix.SetsockoptTimeval(c.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	go func() {
		defer close(c.done)
		buf := make([]byte, 65536)
		for {
			n, from, err := unix.Recvfrom(c.fd, buf, 0)
			if err == unix.EBADF {
				return
			}
			ll, ok := from.(*unix.SockaddrLinklayer)
			if err != nil || !ok || ll.Pkttype == unix.PACKET_OUTGOING || n < 40 {
				select {
				case <-c.done:
					return
				default:
				}
				if err == unix.EAGAIN || err == unix.EINTR || err == nil { // EINTR: Go's preemption signals
					continue
				}
				return
			}
			ip := buf[:n]
			ihl := int(ip[0]&0xf) * 4
			if ip[9] != unix.IPPROTO_TCP || n < ihl+20 {
				continue
			}
			payload := int(binary.BigEndian.Uint16(ip[2:])) - ihl - int(ip[ihl+12]>>4)*4
			if payload <= 0 {
				continue
			}
			// Linux sends retransmissions without ECT (RFC 3168 §6.1.5),
			// so they are counted apart: a segment that ends at or before
			// the highest sequence seen on its connection.
			key := string(ip[12:16]) + string(ip[ihl:ihl+4])
			end := binary.BigEndian.Uint32(ip[ihl+4:]) + uint32(payload)
			c.mu.Lock()
			if hi, ok := c.high[key]; ok && int32(end-hi) <= 0 {
				c.retrans++
			} else {
				c.high[key] = end
				c.tos[ip[1]]++
			}
			c.mu.Unlock()
		}
	}()
	t.Cleanup(func() { unix.Close(c.fd) })
	return c
}

// stop ends the capture and returns the counts of new data segments by
// TOS byte, and of retransmissions.
func (c *capturer) stop() (map[uint8]int, int) {
	unix.Shutdown(c.fd, unix.SHUT_RDWR)
	time.Sleep(200 * time.Millisecond) // the reader wakes at its 100 ms timeout
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[uint8]int{}
	for k, v := range c.tos {
		out[k] = v
	}
	return out, c.retrans
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// TestStopAndCC: a client stopped with SIGTERM mid-run exits 0 with its
// records flushed; the congestion control asked for is used by the
// senders and recorded; one nobody offers is refused with a clear error;
// dctcp works on this kernel (which has no tcp_dctcp) through hosts/cc.
func TestStopAndCC(t *testing.T) {
	testenv.RequireRoot(t)
	lab := upLab(t, "name: "+labName("stop")+"\ntopology: {kind: star, hosts: 2}\nlinks: {rate: 100Mbit}\n")
	run := t.TempDir()
	srv := start(t, lab, "h1", "server", "--host", "h1", "--run-dir", run)
	cl := start(t, lab, "h0", append([]string{"dynamic", "--host", "h0", "--run-dir", run, "--workload", "homa_w3_heavy_middle",
		"--load", "0.2", "--link-rate", "100Mbit", "--duration", "1h", "--cc", "reno"}, peersArgs(lab, "h1")...)...)
	time.Sleep(2 * time.Second)
	cl.stop() // requires exit 0
	srv.stop()
	set := readRecords(t, run)
	if len(set.Flows) < 100 {
		t.Fatalf("%d flows flushed after SIGTERM", len(set.Flows))
	}
	for _, f := range set.Flows {
		if f.CC != "reno" {
			t.Fatalf("flow sent with %q, want reno: %+v", f.CC, f)
		}
	}
	t.Logf("%d flows recorded before SIGTERM, all with cc reno", len(set.Flows))

	bad := start(t, lab, "h0", append([]string{"dynamic", "--host", "h0", "--run-dir", run, "--workload", "hull_1k_10m",
		"--load", "0.2", "--link-rate", "100Mbit", "--duration", "1s", "--cc", "nosuchcc"}, peersArgs(lab, "h1")...)...)
	err := bad.exit(20 * time.Second)
	if err == nil || !strings.Contains(bad.logText(), `congestion control "nosuchcc": congestion control not available`) {
		t.Errorf("unknown cc: exit %v, log:\n%s", err, bad.logText())
	}

	run2 := t.TempDir()
	srv = start(t, lab, "h1", "server", "--host", "h1", "--run-dir", run2)
	dc := start(t, lab, "h0", append([]string{"dynamic", "--host", "h0", "--run-dir", run2, "--workload", "homa_w5_fb_webserver",
		"--load", "0.3", "--link-rate", "100Mbit", "--duration", "2s", "--cc", "dctcp", "--ecn", "on"}, peersArgs(lab, "h1")...)...)
	dc.wait(30 * time.Second)
	srv.stop()
	set = readRecords(t, run2)
	if len(set.Flows) < 10 {
		t.Fatalf("%d dctcp flows\n%s", len(set.Flows), dc.logText())
	}
	for _, f := range set.Flows {
		if f.CC != "dctcp" {
			t.Fatalf("flow sent with %q, want dctcp: %+v", f.CC, f)
		}
	}
	t.Logf("%d flows sent with dctcp", len(set.Flows))
}
