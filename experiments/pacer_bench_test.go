package experiments

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/fabric-emu/fabric/internal/testenv"
	"github.com/fabric-emu/fabric/tc/pacer"
)

// BenchmarkHULLPacer runs HULL's scheme with the pacer (hull/dynamic's
// DCTCP-PQ950-Pacer: the phantom queue marks, a pacer on each of the 9
// servers) and reports the rate controller's cost per paced host: the
// loop's CPU time (every pacer of the process shares its thread) and its
// eBPF programs' at the qdisc tracepoints (run time from the kernel's BPF
// statistics), each per second of traffic, as a share of one core. The
// issue's target: at most 1 % of a core per paced host. Two loads: the
// dynamic workload at 40 %, where buckets are active now and then, and
// one long flow from every server, which keeps every bucket busy. It also
// prints the loop's wake-ups per second and the CPU the hypervisor took
// (steal) during the run.
//
// The loop's CPU time is its thread's, and a kernel without
// IRQ_TIME_ACCOUNTING (this machine's) charges a thread the softirq work
// that runs on it: the lab's packet forwarding, at the interrupts and
// BH-enables that fall while the loop runs. With every bucket busy, perf
// put 63 % of the loop thread's samples there.
func BenchmarkHULLPacer(b *testing.B) {
	testenv.RequireRoot(b)
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		b.Fatal(err)
	}
	defer stats.Close()
	for _, c := range []struct{ name, traffic string }{
		{"dynamic-40%", "{pattern: dynamic, workload: hull_1k_10m, client: h0, servers: rest, conns: 16, load: 0.4}"},
		{"9-long-flows", "{pattern: static, client: [h1, h2, h3, h4, h5, h6, h7, h8, h9], servers: h0, flows: 1}"},
	} {
		b.Run(c.name, func(b *testing.B) {
			spec, err := Parse("hull-pacer.yaml", fmt.Appendf(nil, `name: hull-pacer
lab:
  name: hullpc
  topology: {kind: star, hosts: 10}
  links: {rate: 100Mbit, delay: {down: 1ms}}
  hosts: {pacer: {rate_interval: 640us, idle_timeout: 100ms}}
schemes:
  dctcp-pq950-pacer: {cc: dctcp, pacer: on, ports: {buffer: 700KB, marking: {phantom: {drain: 0.95, threshold: 1KB}}}}
traffic: %s
duration: 10s
`, c.traffic), b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			for range b.N {
				measurePacers(b, spec, 9)
			}
		})
	}
}

// measurePacers runs spec once and reports its pacers' controller cost
// per paced host.
func measurePacers(b *testing.B, spec *Spec, paced int) {
	progs := watchPrograms("bucket_enqueue", "bucket_dequeue")
	cpu0, turns0, mach0 := pacer.LoopCPU(), pacer.LoopTurns(), testenv.ReadCPU(b)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	_, err := Run(ctx, spec, Options{Out: b.TempDir(), LabPrefix: fmt.Sprintf("bhp%d", os.Getpid()%10000), Seed: 1})
	cancel()
	bpfTime, bpfRuns := progs.stop()
	if err != nil {
		b.Fatal(err)
	}
	mach, _ := testenv.ReadCPU(b).Since(mach0)
	traffic := spec.Duration.Seconds()
	loop := (pacer.LoopCPU() - cpu0).Seconds()
	loopPct := 100 * loop / traffic / float64(paced)
	bpfPct := 100 * bpfTime.Seconds() / traffic / float64(paced)
	b.ReportMetric(loopPct, "%core-loop/host")
	b.ReportMetric(bpfPct, "%core-ebpf/host")
	b.ReportMetric(float64(pacer.LoopTurns()-turns0)/traffic, "wakeups/s")
	b.ReportMetric(mach.StealPct, "%steal")
	b.Logf("%d paced hosts, %.0f s of traffic: loop %.3f s of CPU (%.2f %% of a core per host), eBPF %.3f s in %d runs (%.0f ns each, %.2f %% of a core per host); machine idle %.1f %%, steal %.1f %%",
		paced, traffic, loop, loopPct, bpfTime.Seconds(), bpfRuns, float64(bpfTime.Nanoseconds())/float64(max(bpfRuns, 1)), bpfPct, mach.IdlePct, mach.StealPct)
}

// programWatch sums the kernel's run-time statistics of the programs with
// the given names while they exist: the pacers' loop loads them with its
// first pacer and frees them with its last, before the run returns.
type programWatch struct {
	stopc chan struct{}
	done  sync.WaitGroup
	mu    sync.Mutex
	seen  map[ebpf.ProgramID]*ebpf.ProgramStats
}

func watchPrograms(names ...string) *programWatch {
	w := &programWatch{stopc: make(chan struct{}), seen: map[ebpf.ProgramID]*ebpf.ProgramStats{}}
	w.done.Go(func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			w.sample(names)
			select {
			case <-w.stopc:
				return
			case <-tick.C:
			}
		}
	})
	return w
}

// sample records the latest statistics of every program named names.
func (w *programWatch) sample(names []string) {
	var id ebpf.ProgramID
	for {
		next, err := ebpf.ProgramGetNextID(id)
		if err != nil { // os.ErrNotExist after the last
			return
		}
		id = next
		p, err := ebpf.NewProgramFromID(id)
		if err != nil {
			continue
		}
		info, err := p.Info()
		if err == nil && slices.Contains(names, info.Name) {
			if s, err := p.Stats(); err == nil {
				w.mu.Lock()
				w.seen[id] = s
				w.mu.Unlock()
			}
		}
		p.Close()
	}
}

// stop ends the watch and returns the programs' total run time and runs.
func (w *programWatch) stop() (time.Duration, uint64) {
	close(w.stopc)
	w.done.Wait()
	var d time.Duration
	var n uint64
	for _, s := range w.seen {
		d += s.Runtime
		n += s.RunCount
	}
	return d, n
}
