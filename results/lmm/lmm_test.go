package lmm

import (
	"bufio"
	"encoding/binary"
	"hash/fnv"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fabric-emu/fabric/results/internal/synth"
	"github.com/fabric-emu/fabric/results/stats"
)

func TestMatchSyntheticAgainstGroundTruth(t *testing.T) {
	dir := t.TempDir()
	in, out := filepath.Join(dir, "in.pcap"), filepath.Join(dir, "out.pcap")
	truth, err := synth.Write(in, out, synth.Spec{
		Packets: 50000, RateBPS: 1e9, Load: 0.9, DropEvery: 97, FloorNS: 8000, Seed: 1,
	}, true)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Measure(dir, "s0", []string{in}, out, Config{})
	if err != nil {
		t.Fatal(err)
	}
	c := s.Counts
	if c.Matched != int64(truth.Delivered) || c.Unmatched != int64(truth.Dropped) {
		t.Fatalf("counts %+v, truth delivered %d dropped %d", c, truth.Delivered, truth.Dropped)
	}
	if c.EgressOnly != 0 || c.OutsideEgress != 0 || c.Duplicates != 0 || c.OtherPort != 0 || c.Skipped != 0 || c.Truncated != 0 {
		t.Fatalf("unexpected counts %+v", c)
	}
	want := make([]float64, len(truth.LatencyNS))
	for i, v := range truth.LatencyNS {
		want[i] = float64(v) / 1e3
	}
	ws := stats.Summarize(want)
	if s.US.P50 != ws.P50 || s.US.P99 != ws.P99 || s.US.P999 != ws.P999 || s.US.Max != ws.Max || s.US.Min != ws.Min {
		t.Fatalf("latency summary %+v, truth %+v", s.US, ws)
	}
	if d := s.US.Mean - ws.Mean; d > 1e-6 || d < -1e-6 {
		t.Fatalf("mean %v, truth %v", s.US.Mean, ws.Mean)
	}
	// The queue must actually have formed, or the test proves little.
	if ws.P99 < 5*ws.Min {
		t.Fatalf("synthetic queue too shallow: %+v", ws)
	}

	// The per-packet CSV has one row per matched packet, each consistent.
	f := FilesFor(dir, "s0")
	rows := readLines(t, f.Packets)
	if rows[0]+"\n" != PacketsHeader || len(rows)-1 != truth.Delivered {
		t.Fatalf("packets CSV: header %q, %d rows, want %d", rows[0], len(rows)-1, truth.Delivered)
	}
	var lat []float64
	for _, r := range rows[1:] {
		var inNS, outNS, l int64
		parseInts(t, r, &inNS, &outNS, &l)
		if outNS-inNS != l {
			t.Fatalf("row %q: egress-ingress != latency", r)
		}
		lat = append(lat, float64(l))
	}
	slices.Sort(lat)
	gotNS := make([]float64, len(truth.LatencyNS))
	for i, v := range truth.LatencyNS {
		gotNS[i] = float64(v)
	}
	slices.Sort(gotNS)
	if !slices.Equal(lat, gotNS) {
		t.Fatal("per-packet latencies differ from ground truth")
	}
	cdf := readLines(t, f.CDF)
	if cdf[0] != "latency_us,fraction" || !strings.HasSuffix(cdf[len(cdf)-1], ",1") {
		t.Fatalf("CDF file: first %q last %q", cdf[0], cdf[len(cdf)-1])
	}
	back, err := ReadSummary(f.Summary)
	if err != nil || back.Counts != s.Counts || back.US.P99 != s.US.P99 {
		t.Fatalf("summary round trip: %v %+v", err, back)
	}
}

func parseInts(t *testing.T, row string, dst ...*int64) {
	t.Helper()
	fields := strings.Split(row, ",")
	for i, d := range dst {
		var v int64
		for _, ch := range fields[i] {
			v = v*10 + int64(ch-'0')
		}
		*d = v
	}
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines
}

// frame builds an Ethernet+IPv4+UDP frame with payload.
func frame(src, dst byte, ipID uint16, sport, dport uint16, payload []byte) []byte {
	b := make([]byte, 42+len(payload))
	copy(b[0:12], []byte{2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2})
	binary.BigEndian.PutUint16(b[12:], 0x0800)
	ip := b[14:]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(28+len(payload)))
	binary.BigEndian.PutUint16(ip[4:], ipID)
	ip[8] = 64
	ip[9] = 17
	binary.BigEndian.PutUint16(ip[10:], 0xbeef)
	copy(ip[12:], []byte{10, 0, src, 2})
	copy(ip[16:], []byte{10, 0, dst, 2})
	binary.BigEndian.PutUint16(ip[20:], sport)
	binary.BigEndian.PutUint16(ip[22:], dport)
	binary.BigEndian.PutUint16(ip[24:], uint16(8+len(payload)))
	copy(ip[28:], payload)
	return b
}

// routed is f as it leaves a router: new MACs, TTL-1, new checksum.
func routed(f []byte) []byte {
	g := slices.Clone(f)
	copy(g[0:12], []byte{2, 9, 9, 9, 9, 1, 2, 9, 9, 9, 9, 2})
	g[14+8]--
	g[14+10], g[14+11] = 0x12, 0x34
	return g
}

func TestKeyIgnoresWhatRoutersRewrite(t *testing.T) {
	f := frame(1, 3, 7, 4000, 5001, []byte("probe 1 sent at 123"))
	a, why := parseFrame(f)
	if why != parsedOK {
		t.Fatal(why)
	}
	b, _ := parseFrame(routed(f))
	if a.key != b.key {
		t.Fatalf("routing changed the key: %+v vs %+v", a.key, b.key)
	}
	c, _ := parseFrame(frame(1, 3, 7, 4000, 5001, []byte("probe 2 sent at 123")))
	if c.key == a.key {
		t.Fatal("different UDP payloads must give different keys")
	}
	h := fnv.New64a()
	h.Write([]byte("probe 1 sent at 123"))
	if a.key.Extra != h.Sum64() {
		t.Fatal("fnv1a disagrees with hash/fnv")
	}
}

func TestProbeModeAndCounters(t *testing.T) {
	big := make([]byte, 1472) // IP length 1500
	m := NewMatcher(Config{Mode: Probes, Window: time.Millisecond})
	ms := int64(time.Millisecond)
	probe := func(i byte) []byte { big[0] = i; return frame(1, 3, uint16(i), 4000, 7, big) }
	m.Ingress(-5, probe(9)) // before the egress capture's first packet
	m.Ingress(0, probe(1))
	m.Egress(30_000, routed(probe(1)))                        // matched, 30 µs
	m.Ingress(30_010, frame(1, 3, 9, 4000, 7, []byte("ack"))) // small UDP: not a probe
	m.Ingress(30_020, []byte{1, 2, 3})                        // truncated
	m.Ingress(30_100, probe(2))                               // dropped in the switch
	m.Ingress(30_200, frame(1, 4, 5, 4000, 7, big))           // to a host behind another port
	m.Egress(30_500, routed(frame(2, 3, 1, 4000, 7, big)))    // from a port not captured
	m.Ingress(3*ms, probe(3))
	m.Ingress(3*ms+5, probe(3)) // same key while the first waits
	m.Egress(3*ms+40_000, routed(probe(3)))
	m.Egress(3*ms+40_100, routed(probe(4))) // never entered (capture started late)
	m.Ingress(4*ms, probe(5))               // after the egress capture's last packet
	r, err := m.Finish()
	if err != nil {
		t.Fatal(err)
	}
	want := Counts{Matched: 2, Unmatched: 1, OtherPort: 1, EgressOnly: 2, OutsideEgress: 2, Duplicates: 1, Skipped: 1, Truncated: 1}
	if r.Counts != want {
		t.Fatalf("counts %+v\nwant   %+v", r.Counts, want)
	}
	if got := r.Latencies(); !slices.Equal(got, []float64{30_000, 39_995}) {
		t.Fatalf("latencies %v", got)
	}
}

// Matching every packet with a probe port set, the probe stream is also
// summarised on its own: its matched latencies and the probes the switch
// dropped, while every packet, probes included, stays in the whole.
func TestAllPacketsTalliesTheProbeStreamApart(t *testing.T) {
	big := make([]byte, 1472)
	m := NewMatcher(Config{Probe: ProbeSelector{DstPort: 5302}, Window: time.Millisecond})
	ms := int64(time.Millisecond)
	data := func(i byte) []byte { big[0] = i; return frame(2, 3, uint16(i), 4000, 80, big) }
	probe := func(i byte) []byte { big[0] = i; return frame(1, 3, uint16(i), 4000, 5302, big) }
	m.Ingress(0, data(1))
	m.Ingress(10, probe(1))
	m.Egress(100_000, routed(data(1)))  // 100 µs
	m.Egress(110_010, routed(probe(1))) // a probe, 110 µs
	m.Ingress(200_000, probe(2))        // dropped: the egress port sees later packets
	m.Ingress(200_100, data(2))         // dropped too
	m.Ingress(ms, data(4))
	m.Egress(ms+100, routed(data(4))) // 0.1 µs
	m.Ingress(3*ms, probe(3))         // a probe, 20 µs
	m.Egress(3*ms+20_000, routed(probe(3)))
	m.Ingress(3*ms+30_000, data(3))
	m.Egress(3*ms+30_500, routed(data(3))) // 0.5 µs
	r, err := m.Finish()
	if err != nil {
		t.Fatal(err)
	}
	if r.Counts.Matched != 5 || r.Counts.Unmatched != 2 {
		t.Fatalf("counts %+v, want 5 matched and 2 dropped", r.Counts)
	}
	if p := r.Probe; p == nil || p.Matched != 2 || p.Lost != 1 || p.NS.Min != 20_000 || p.NS.Max != 110_000 {
		t.Fatalf("probe tally %+v, want 2 matched (20 and 110 µs) and 1 lost", p)
	}
	if r.NS.N != 5 || r.NS.Max != 110_000 || r.NS.Min != 100 {
		t.Fatalf("every packet's summary %+v, want the 5 matched, probes included", r.NS)
	}
	if r, _ := NewMatcher(Config{}).Finish(); r.Probe != nil {
		t.Fatal("a match without a probe port tallied a probe stream")
	}
}

func TestCorruptCaptureNamesFileAndOffset(t *testing.T) {
	dir := t.TempDir()
	in, out := filepath.Join(dir, "in.pcap"), filepath.Join(dir, "out.pcap")
	if _, err := synth.Write(in, out, synth.Spec{Packets: 100, RateBPS: 1e8, Load: 0.5, Seed: 2}, false); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(out)
	os.WriteFile(out, raw[:len(raw)-7], 0o644)
	_, err := MatchFiles([]string{in}, out, Config{})
	if err == nil || !strings.Contains(err.Error(), out) || !strings.Contains(err.Error(), "byte offset") {
		t.Fatalf("truncated egress capture: err = %v", err)
	}
}
