package experiments

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fabric-emu/fabric/hosts/transport"
	"github.com/fabric-emu/fabric/hosts/transport/transporttest"
	"github.com/fabric-emu/fabric/internal/testenv"
)

// BenchmarkTransportCPU runs each of fabric's own transports on the same
// lab and schedule, Homa's W4 workload (homa_w4_google_all) at 80 % load
// from 8 servers to one client on a 10 Mbit/s star, and reports its CPU
// per message delivered and per packet: the transport processes' user and
// system time, summed over the hosts from their stats lines, over the
// messages the trial recorded and the packets the stats lines count
// (through the transport's sockets for homa and ndp, the host's TCP
// segments for tcp). It prints the CPU the hypervisor took (steal)
// during each run, and whether the trial was faithful.
func BenchmarkTransportCPU(b *testing.B) {
	testenv.RequireRoot(b)
	for _, c := range []struct{ name, scheme, stats string }{
		{"tcp", "{cc: cubic, ports: {buffer: 500KB}}", "tcp stats"},
		{"homa", "{transport: homa, ports: {buffer: 500KB, queues: {bands: 8}}}", "homa stats"},
		{"ndp", "{transport: ndp, ports: {ndp: {}}}", "ndp stats"},
	} {
		b.Run(c.name, func(b *testing.B) {
			spec, err := Parse("transport-cpu.yaml", fmt.Appendf(nil, `name: transport-cpu
lab: {name: trcpu, topology: {kind: star, hosts: 9}, links: {rate: 10Mbit, delay: {down: 300us}}}
schemes: {%s: %s}
traffic: {pattern: dynamic, workload: homa_w4_google_all, load: 0.8, client: h0, servers: rest}
duration: 10s
`, c.name, c.scheme), b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			for range b.N {
				measureTransport(b, spec, c.stats)
			}
		})
	}
}

// measureTransport runs spec's one trial and reports its transport's CPU
// per message and per packet.
func measureTransport(b *testing.B, spec *Spec, stats string) {
	mach0 := testenv.ReadCPU(b)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	res, err := Run(ctx, spec, Options{Out: b.TempDir(), LabPrefix: fmt.Sprintf("btc%d", os.Getpid()%10000), Seed: 1})
	cancel()
	if err != nil {
		b.Fatal(err)
	}
	mach, _ := testenv.ReadCPU(b).Since(mach0)
	tr := res.Trials[0]
	sums := transporttest.SumStats(b, filepath.Join(tr.Dir, "logs"), stats, "packets", "cpu_us")
	set, err := transport.ReadDir(tr.Dir)
	if err != nil {
		b.Fatal(err)
	}
	msgs, pkts, cpu := len(set.Flows), sums["packets"], time.Duration(sums["cpu_us"])*time.Microsecond
	faithful := res.Report.Rows[0].Unfaith == 0
	b.ReportMetric(float64(cpu.Microseconds())/float64(max(msgs, 1)), "cpu-µs/message")
	b.ReportMetric(float64(cpu.Microseconds())/float64(max(pkts, 1)), "cpu-µs/packet")
	b.ReportMetric(mach.StealPct, "%steal")
	b.Logf("%d messages, %d packets, %v of CPU in the transport processes; machine idle %.1f %%, steal %.1f %%; trial faithful: %v",
		msgs, pkts, cpu, mach.IdlePct, mach.StealPct, faithful)
}
