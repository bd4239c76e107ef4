package lmm

import (
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"

	"fabric/results/internal/synth"
)

// benchPackets is the size of the synthetic pair. `make bench` sets
// FABRIC_LMM_BENCH_PACKETS=5000000 (the figure); the default keeps
// `go test -bench .` quick.
func benchPackets() int {
	if n, err := strconv.Atoi(os.Getenv("FABRIC_LMM_BENCH_PACKETS")); err == nil && n > 0 {
		return n
	}
	return 200_000
}

var benchPair struct {
	once    sync.Once
	dir     string
	in, out string
	truth   synth.Truth
	err     error
}

// BenchmarkMatch measures the whole LMM pipeline on a synthetic capture
// pair: streaming both pcaps, matching, the per-packet CSV, exact
// statistics and the CDF. It reports matched packets per second and the
// process's peak RSS, which must stay bounded (the pair itself is ~150 bytes
// per packet per file and is never loaded).
func BenchmarkMatch(b *testing.B) {
	n := benchPackets()
	benchPair.once.Do(func() {
		benchPair.dir, benchPair.err = os.MkdirTemp("", "fabric-lmm-bench-")
		if benchPair.err != nil {
			return
		}
		benchPair.in = filepath.Join(benchPair.dir, "in.pcap")
		benchPair.out = filepath.Join(benchPair.dir, "out.pcap")
		benchPair.truth, benchPair.err = synth.Write(benchPair.in, benchPair.out,
			synth.Spec{Packets: n, RateBPS: 1e9, Load: 0.8, DropEvery: 1000, FloorNS: 8000, Seed: 7}, false)
	})
	if benchPair.err != nil {
		b.Fatal(benchPair.err)
	}
	outDir := b.TempDir()
	b.ResetTimer()
	var matched int64
	for i := 0; i < b.N; i++ {
		s, err := Measure(outDir, "bench", []string{benchPair.in}, benchPair.out, Config{})
		if err != nil {
			b.Fatal(err)
		}
		if s.Counts.Matched != int64(benchPair.truth.Delivered) {
			b.Fatalf("matched %d, want %d", s.Counts.Matched, benchPair.truth.Delivered)
		}
		matched += s.Counts.Matched
	}
	b.StopTimer()
	b.ReportMetric(float64(matched)/b.Elapsed().Seconds(), "pkts/s")
	b.ReportMetric(float64(n), "pkts/pair")
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		b.ReportMetric(float64(ru.Maxrss)/1024, "peakRSS-MB")
	}
}

// TestMain removes the benchmark's pair, which must outlive the single
// benchmark run because the testing package calls BenchmarkMatch repeatedly.
func TestMain(m *testing.M) {
	code := m.Run()
	if benchPair.dir != "" {
		os.RemoveAll(benchPair.dir)
	}
	os.Exit(code)
}
