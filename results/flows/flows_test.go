package flows

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"fabric/internal/records"
)

func flow(id uint64, size, bytes int64, fct time.Duration) records.Flow {
	start := int64(1_700_000_000e9) + int64(id)*1e6
	return records.Flow{ID: id, Pattern: "dynamic", Src: "h1", Dst: "h5", Size: size, Bytes: bytes, StartNS: start, EndNS: start + int64(fct)}
}

func TestIdealAndSlowdownHandComputed(t *testing.T) {
	ideal := Ideal{BottleneckBPS: 1e9, RTT: 100 * time.Microsecond}
	// 1000 B at 1 Gbit/s = 8 µs, + 100 µs RTT = 108 µs.
	if got := ideal.FCT(1000); got != 108*time.Microsecond {
		t.Fatalf("ideal FCT(1000) = %v", got)
	}
	set := &records.Set{Flows: []records.Flow{
		flow(1, 1000, 1000, 216*time.Microsecond),                // slowdown 2
		flow(2, 1000, 1000, 108*time.Microsecond),                // slowdown 1
		flow(3, 1000, 1000, 540*time.Microsecond),                // slowdown 5
		flow(4, 10_000_000, 10_000_000, 160200*time.Microsecond), // ideal 80.1 ms: slowdown 2
		flow(5, 50_000, 50_000, time.Millisecond),
		flow(6, 20_000_000, 20_000_000, time.Second),
		flow(7, 10_000_000, 4_000_000, time.Second), // cut off: incomplete
	}}
	a, err := Analyze(set, ideal)
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
	if _, err := Analyze(set, Ideal{}); err == nil {
		t.Fatal("a zero bottleneck rate must be rejected")
	}
}

func TestQueriesAndThroughput(t *testing.T) {
	s0 := int64(1_700_000_000e9)
	set := &records.Set{
		Queries: []records.Query{
			{ID: 1, Workers: 8, Size: 10000, StartNS: s0, EndNS: s0 + 2_000_000},
			{ID: 2, Workers: 8, Size: 10000, StartNS: s0, EndNS: s0 + 1_000_000},
		},
		Samples: []records.Sample{
			// Flow 1: 12.5 MB/s for 2 s = 100 Mbit/s.
			{FlowID: 1, Src: "h0", Dst: "h3", TNS: s0, Bytes: 0},
			{FlowID: 1, Src: "h0", Dst: "h3", TNS: s0 + 1e9, Bytes: 12_500_000},
			{FlowID: 1, Src: "h0", Dst: "h3", TNS: s0 + 2e9, Bytes: 25_000_000},
			// Flow 2: 50 Mbit/s.
			{FlowID: 2, Src: "h1", Dst: "h2", TNS: s0, Bytes: 1000},
			{FlowID: 2, Src: "h1", Dst: "h2", TNS: s0 + 2e9, Bytes: 12_501_000},
		},
	}
	a, err := Analyze(set, Ideal{BottleneckBPS: 100e6})
	if err != nil {
		t.Fatal(err)
	}
	if q := a.Queries; q.N != 2 || q.QCTUS.Mean != 1500 || q.QCTUS.Max != 2000 {
		t.Fatalf("queries %+v", q)
	}
	tp := a.Throughput
	if tp.Flows != 2 || tp.MbpsDist.Min != 50 || tp.MbpsDist.Max != 100 || tp.Fraction.Min != 0.5 || tp.MeanFraction != 0.75 {
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
