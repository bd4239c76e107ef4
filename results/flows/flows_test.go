package flows

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fabric-emu/fabric/hosts/transport"
)

func flow(id uint64, size, bytes int64, fct time.Duration) transport.Flow {
	start := int64(1_700_000_000e9) + int64(id)*1e6
	return transport.Flow{ID: id, Pattern: "dynamic", Src: "h1", Dst: "h5", Size: size, Bytes: bytes, StartNS: start, EndNS: start + int64(fct)}
}

func TestIdealAndSlowdownHandComputed(t *testing.T) {
	ideal := Ideal{BottleneckBPS: 1e9, RTT: 200 * time.Microsecond, Links: 1}
	// 1000 B at 1 Gbit/s = 8 µs, + half the 200 µs RTT = 108 µs.
	if got := ideal.FCT(1000); got != 108*time.Microsecond {
		t.Fatalf("ideal FCT(1000) = %v", got)
	}
	// On a path that serialises no lone packet (no delay line) the last
	// 1500 B cross at once: 1000 B take half the RTT alone, 10 MB the
	// 9,998,500 B before the last packet at 1 Gbit/s (79.988 ms) more.
	none := Ideal{BottleneckBPS: 1e9, RTT: 200 * time.Microsecond}
	if got := none.FCT(1000); got != 100*time.Microsecond {
		t.Fatalf("ideal FCT(1000) over no serialising link = %v", got)
	}
	if got := none.FCT(10_000_000); got != 80088*time.Microsecond {
		t.Fatalf("ideal FCT(10 MB) over no serialising link = %v", got)
	}
	// Across two links the switch holds the message once: 8 µs more; a
	// long message only its last 1500 B (12 µs).
	two := Ideal{BottleneckBPS: 1e9, RTT: 200 * time.Microsecond, Links: 2}
	if got := two.FCT(1000); got != 116*time.Microsecond {
		t.Fatalf("ideal FCT(1000) over two links = %v", got)
	}
	if got := two.FCT(10_000_000); got != 80112*time.Microsecond {
		t.Fatalf("ideal FCT(10 MB) over two links = %v", got)
	}
	set := &transport.Set{Flows: []transport.Flow{
		flow(1, 1000, 1000, 216*time.Microsecond),                // slowdown 2
		flow(2, 1000, 1000, 108*time.Microsecond),                // slowdown 1
		flow(3, 1000, 1000, 540*time.Microsecond),                // slowdown 5
		flow(4, 10_000_000, 10_000_000, 160200*time.Microsecond), // ideal 80.1 ms: slowdown 2
		flow(5, 50_000, 50_000, time.Millisecond),
		flow(6, 20_000_000, 20_000_000, time.Second),
		flow(7, 10_000_000, 4_000_000, time.Second), // cut off: incomplete
	}}
	a, err := Analyze(set, ideal, 0)
	if err != nil {
		t.Fatal(err)
	}
	if a.Flows != 7 || a.Incomplete != 1 || a.All.N != 6 {
		t.Fatalf("flows %d incomplete %d complete %d", a.Flows, a.Incomplete, a.All.N)
	}
	k := a.Bucket("1KB")
	// 1KB FCTs 108, 216, 540 µs: mean 288, p50 216, p99 540.
	if k.N != 3 || k.FCTUS.Mean != 288 || k.FCTUS.P50 != 216 || k.FCTUS.P99 != 540 {
		t.Fatalf("1KB bucket %+v", k.FCTUS)
	}
	if k.Slowdown.Min != 1 || k.Slowdown.P50 != 2 || k.Slowdown.Max != 5 {
		t.Fatalf("1KB slowdowns %+v", k.Slowdown)
	}
	m := a.Bucket("10MB")
	if m.N != 1 || m.FCTUS.Mean != 160200 || m.Slowdown.Mean != 2 {
		t.Fatalf("10MB bucket n=%d fct=%+v sd=%+v", m.N, m.FCTUS, m.Slowdown)
	}
	for name, want := range map[string]int{"<10KB": 3, "10-100KB": 1, "100KB-10MB": 1, ">10MB": 1} {
		if got := a.Bucket(name).N; got != want {
			t.Errorf("bucket %s: %d flows, want %d", name, got, want)
		}
	}
	if _, err := Analyze(set, Ideal{}, 0); err == nil {
		t.Fatal("a zero bottleneck rate must be rejected")
	}
}

func TestQueriesAndThroughput(t *testing.T) {
	s0 := int64(1_700_000_000e9)
	set := &transport.Set{
		Queries: []transport.Query{
			{ID: 1, Workers: 8, Size: 10000, StartNS: s0, EndNS: s0 + 2_000_000},
			{ID: 2, Workers: 8, Size: 10000, StartNS: s0, EndNS: s0 + 1_000_000},
		},
		Samples: []transport.Sample{
			// Flow 1: 12.5 MB/s for 2 s = 100 Mbit/s.
			{FlowID: 1, Src: "h0", Dst: "h3", TNS: s0, Bytes: 0},
			{FlowID: 1, Src: "h0", Dst: "h3", TNS: s0 + 1e9, Bytes: 12_500_000},
			{FlowID: 1, Src: "h0", Dst: "h3", TNS: s0 + 2e9, Bytes: 25_000_000},
			// Flow 2: 50 Mbit/s.
			{FlowID: 2, Src: "h1", Dst: "h2", TNS: s0, Bytes: 1000},
			{FlowID: 2, Src: "h1", Dst: "h2", TNS: s0 + 2e9, Bytes: 12_501_000},
		},
	}
	a, err := Analyze(set, Ideal{BottleneckBPS: 100e6}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if q := a.Queries; q.N != 2 || q.QCTUS.Mean != 1500 || q.QCTUS.Max != 2000 {
		t.Fatalf("queries %+v", q)
	}
	tp := a.Throughput
	// Two receivers' links of 100 Mbit/s carried 150: 0.75. Jain:
	// 150² / (2 · (100² + 50²)) = 0.9.
	if tp.Flows != 2 || tp.MbpsDist.Min != 50 || tp.MbpsDist.Max != 100 || tp.Utilization != 0.75 || math.Abs(tp.Jain-0.9) > 1e-12 {
		t.Fatalf("throughput %+v", tp)
	}
	if s := tp.Series[0]; s.Label != "h0→h3" || len(s.Mbps) != 2 || s.Mbps[1] != 100 || s.Seconds[1] != 2 {
		t.Fatalf("series %+v", s)
	}
	dir := t.TempDir()
	files, err := a.WriteCDFs(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "qct.cdf.csv"))
	if err != nil || string(b) != "qct_us,fraction\n1000,0.5\n2000,1\n" {
		t.Fatalf("qct.cdf.csv = %q (%v); files %v", b, err, files)
	}
	if !strings.HasSuffix(files[len(files)-1], "throughput.cdf.csv") {
		t.Fatalf("files %v", files)
	}
}

// Incast queries come from the responses' query ids when the transport
// writes no query records: a query spans its responses, and one with a
// missing or cut-short response did not complete.
func TestQueriesFromFlows(t *testing.T) {
	fl := func(q uint64, start, end, bytes int64) transport.Flow {
		return transport.Flow{Query: q, Dst: "h0", Size: 100, Bytes: bytes, StartNS: start, EndNS: end}
	}
	flows := []transport.Flow{
		fl(1, 10, 50, 100), fl(1, 10, 80, 100), // complete: 70 ns
		fl(2, 100, 130, 100), fl(2, 100, 190, 60), // one response cut short
		fl(3, 200, 220, 100),       // one response missing
		{ID: 9, Size: 5, Bytes: 5}, // not an incast response
	}
	qs := QueriesOf(flows, 2)
	if len(qs) != 1 || qs[0].ID != 1 || qs[0].EndNS-qs[0].StartNS != 70 || qs[0].Workers != 2 {
		t.Fatalf("queries %+v, want only query 1 of 70 ns", qs)
	}
	if n := len(QueriesOf(flows, 0)); n != 2 {
		t.Fatalf("with the response count unknown, %d queries, want 2 (1 and 3)", n)
	}
}

// The spectrum's bins hold equal counts of flows, shortest first, with the
// percentiles of each bin's slowdowns; the shortest half is the first five
// bins together.
func TestSlowdownSpectrum(t *testing.T) {
	ideal := Ideal{BottleneckBPS: 1e9, RTT: 0}
	var fs []transport.Flow
	// 1000 flows: flow i has size 1000·(i/100+1) bytes, so each decile
	// is one size; its slowdown is 1 + (i mod 100), spread 1..100.
	for i := range 1000 {
		size := int64(1000 * (i/100 + 1))
		sd := float64(1 + i%100)
		fct := time.Duration(float64(ideal.FCT(size)) * sd)
		fs = append(fs, flow(uint64(1000-i), size, size, fct)) // ids run against sizes
	}
	a, err := Analyze(&transport.Set{Flows: fs}, ideal, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Spectrum) != SpectrumBins {
		t.Fatalf("%d bins, want %d", len(a.Spectrum), SpectrumBins)
	}
	for k, b := range a.Spectrum {
		want := int64(1000 * (k + 1))
		if b.N != 100 || b.MinSize != want || b.MaxSize != want {
			t.Errorf("bin %d: %d flows of %d..%d B, want 100 of %d B", k, b.N, b.MinSize, b.MaxSize, want)
		}
		if math.Abs(b.P50-50) > 1e-6 || math.Abs(b.P99-99) > 1e-6 {
			t.Errorf("bin %d: slowdown p50 %v p99 %v, want 50 and 99", k, b.P50, b.P99)
		}
	}
	if a.ShortHalf.N != 500 || a.ShortHalf.Slowdown.Max > 100+1e-6 {
		t.Errorf("shortest half: %d flows, max slowdown %v", a.ShortHalf.N, a.ShortHalf.Slowdown.Max)
	}
	// Too few flows for a 99th percentile per bin: no spectrum.
	b, _ := Analyze(&transport.Set{Flows: fs[:150]}, ideal, 0)
	if b.Spectrum != nil {
		t.Errorf("a spectrum from 150 flows")
	}
}

// Two flows that fill one receiver's 100 Mbit/s link between them (47.8
// Mbit/s each, as HULL Table 1's do here) use it at 0.956, not 0.478.
func TestUtilizationOfASharedBottleneck(t *testing.T) {
	s0 := int64(1_700_000_000e9)
	var samples []transport.Sample
	for id, src := range []string{"h1", "h2"} {
		samples = append(samples,
			transport.Sample{FlowID: uint64(id + 1), Src: src, Dst: "h0", TNS: s0, Bytes: 0},
			transport.Sample{FlowID: uint64(id + 1), Src: src, Dst: "h0", TNS: s0 + 10e9, Bytes: 59_750_000})
	}
	a, err := Analyze(&transport.Set{Samples: samples}, Ideal{BottleneckBPS: 100e6}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if u := a.Throughput.Utilization; u < 0.9 || math.Abs(u-0.956) > 1e-9 || a.Throughput.Jain != 1 {
		t.Fatalf("utilization %v, Jain %v; want 0.956 and 1", u, a.Throughput.Jain)
	}
}
