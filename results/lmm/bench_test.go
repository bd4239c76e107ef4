package lmm

import (
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"

	"github.com/fabric-emu/fabric/results/internal/synth"
	"github.com/fabric-emu/fabric/results/stats"
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

// BenchmarkMatch measures the LMM on a synthetic capture pair: streaming
// both pcaps, matching, exact statistics and the CDF, with the per-packet
// CSV either formatted and discarded (csv=discard: the matching and
// statistics the ≥1M packets/s target is about) or written to a file
// (csv=file: adds ~75 bytes of disk writes per packet, which this VM's
// disk, not the CPU, limits for multi-million-packet runs). It reports
// matched packets per second and the process's peak RSS, which stays
// bounded: the pair (~150 bytes per packet per file) is never loaded, only
// 8 bytes per matched packet are kept for exact percentiles.
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
	for _, mode := range []string{"discard", "file"} {
		b.Run("csv="+mode, func(b *testing.B) {
			outDir := b.TempDir()
			var matched int64
			for i := 0; i < b.N; i++ {
				var counts Counts
				if mode == "file" {
					s, err := Measure(outDir, "bench", []string{benchPair.in}, benchPair.out, Config{})
					if err != nil {
						b.Fatal(err)
					}
					counts = s.Counts
				} else {
					pw, _ := NewPacketWriter(io.Discard)
					r, err := MatchFiles([]string{benchPair.in}, benchPair.out, Config{Packets: pw})
					if err != nil {
						b.Fatal(err)
					}
					if len(stats.CDF(r.Latencies(), cdfPoints)) == 0 {
						b.Fatal("empty CDF")
					}
					counts = r.Counts
				}
				if counts.Matched != int64(benchPair.truth.Delivered) {
					b.Fatalf("matched %d, want %d", counts.Matched, benchPair.truth.Delivered)
				}
				matched += counts.Matched
			}
			b.ReportMetric(float64(matched)/b.Elapsed().Seconds(), "pkts/s")
			b.ReportMetric(float64(n), "pkts/pair")
			var ru syscall.Rusage
			if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
				b.ReportMetric(float64(ru.Maxrss)/1024, "peakRSS-MB")
			}
		})
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
