package ndp

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/fabric-emu/fabric/hosts/transport"
	"github.com/fabric-emu/fabric/internal/testenv"
)

// oneFlow is one 8 MB message from h1 to h0 across a 100 Mbit/s star of
// NDP ports, without delay lines: the links' own serialisation and the
// software on both ends are the path, and the CPU this process uses is
// NDP's (both ends) and the kernel's work on its packets, not a delay
// line's.
func oneFlow(t testing.TB, name string) labResult {
	res := runLab(t, labRun{name: name, hosts: 2, links: "rate: 100Mbit", limit: 10 * time.Second,
		msgs: func(addr map[string]netip.Addr) []transport.Message {
			return []transport.Message{{ID: 1, Src: "h1", SrcAddr: addr["h1"], Dst: "h0", DstAddr: addr["h0"], Size: 8 << 20, Pattern: "static"}}
		}})
	res.check(t)
	return res
}

// rates are a one-flow run's goodput (message bytes over the time from
// its scheduled start to its last byte delivered) and the port's wire
// rate over the same time (every byte s0 sent to h0: headers, trims).
func rates(res labResult) (goodput, wire float64) {
	if len(res.set.Flows) != 1 {
		return 0, 0
	}
	f := res.set.Flows[0]
	secs := float64(f.EndNS-f.StartNS) / 1e9
	return float64(f.Bytes) * 8 / secs / 1e6, float64(res.port.Bytes) * 8 / secs / 1e6
}

// One NDP flow alone fills most of a 100 Mbit/s path: goodput ≥ 70 % of
// the link rate here (the benchmark's target is 90 %; the margin is for
// a noisy two-core machine shared with other tests). The best goodput a
// 1500-byte MTU allows is 1452/1514 of the rate, 95.9 %.
func TestOneFlowRate(t *testing.T) {
	testenv.RequireRoot(t)
	// A run below the floor runs once more, and the second judges: a CI
	// run on 2026-11-27 (a boot whose hypervisor took 8 % of the CPU)
	// reached 28.2 Mbit/s at 42.4 cpu-µs/packet.
	testenv.Retry(t, 2, func(a *testenv.Attempt) {
		res := oneFlow(t, fmt.Sprintf("r%d", a.N))
		goodput, wire := rates(res)
		a.Logf("one flow: goodput %.1f Mbit/s, port %.1f Mbit/s; %d packets, %.1f cpu-µs/packet; RTT %v; endpoints %+v; port %+v",
			goodput, wire, res.packets, float64(res.cpu.Microseconds())/float64(max(res.packets, 1)), res.rtt, res.stats, *res.port.NDP)
		if goodput < 70 {
			a.Errorf("goodput %.1f Mbit/s, want ≥ 70 (70 %% of 100 Mbit/s)", goodput)
		}
	})
}

// BenchmarkNDPOneFlow: one 8 MB NDP flow alone on a 100 Mbit/s path; the
// target is ≥ 90 Mbit/s of goodput. cpu-µs/packet is this process's CPU
// (both endpoints, user and system) over every packet through their
// sockets, DATA and control, sent or received.
func BenchmarkNDPOneFlow(b *testing.B) {
	testenv.RequireRoot(b)
	for range b.N {
		res := oneFlow(b, "b")
		goodput, wire := rates(res)
		b.ReportMetric(goodput, "Mbit/s")
		b.ReportMetric(wire, "wire-Mbit/s")
		b.ReportMetric(float64(res.cpu.Microseconds())/float64(max(res.packets, 1)), "cpu-µs/packet")
	}
}
