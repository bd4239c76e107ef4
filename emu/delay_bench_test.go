package emu_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/fabric-emu/fabric/emu"
	"github.com/fabric-emu/fabric/emu/emutest"
	"github.com/fabric-emu/fabric/internal/testenv"
	"github.com/fabric-emu/fabric/tc/tctest"
)

// delayBenchLab has one direction delayed by 1 ms on a 1 Gbit/s link.
const delayBenchLab = `name: %s
topology:
  kind: custom
  nodes: {h0: {kind: host}, h1: {kind: host}, s0: {kind: switch}}
  links:
    - {endpoints: [h0:eth0, s0:eth1], delay: {up: 1ms}}
    - {endpoints: [h1:eth0, s0:eth2]}
links: {rate: 1Gbit}
ports: {buffer: 2MB}
hosts: {nic: {buffer: 2MB}}
`

// BenchmarkDelayLineCapacity pushes small UDP datagrams (64 wire bytes)
// through one direction delayed by 1 ms on a 1 Gbit/s link, at rising
// rates, and reports for each what arrived, the line's lateness beyond
// its delay (p50, p99), drops nobody asked for, and the loop's CPU per
// packet. The targets: at least 150 kpps, p99 lateness within
// 50 µs at 50 kpps.
func BenchmarkDelayLineCapacity(b *testing.B) {
	testenv.RequireRoot(b)
	lab := emutest.Up(b, fmt.Sprintf(delayBenchLab, emutest.Name("bdelay")))
	for b.Loop() {
		for _, kpps := range []float64{20, 50, 100, 150, 200, 300} {
			measureRate(b, lab, kpps)
		}
	}
}

// BenchmarkDelayLineCost: the same line at 10, 20 and 50 kpps, what its
// loop costs per packet apart from the forwarding its verdicts carry: the
// loop's thread CPU less the time it spent in verdict system calls (both
// from delay.Use), in which the kernel carries each released packet
// on through the lab; both per packet, with the line's p99 lateness and
// the machine's steal. Targets: the loop's own ≤ 10 µs a packet, and
// ≤ 50 µs p99 lateness at 20 kpps.
func BenchmarkDelayLineCost(b *testing.B) {
	testenv.RequireRoot(b)
	lab := emutest.Up(b, fmt.Sprintf(delayBenchLab, emutest.Name("bdelay")))
	for b.Loop() {
		for _, kpps := range []float64{10, 20, 50} {
			measureRate(b, lab, kpps)
		}
	}
}

func measureRate(b *testing.B, lab *emu.Lab, kpps float64) {
	sink := tctest.ListenUDP(b, lab, "h1", 9200)
	defer sink.Close()
	w := lab.DelayLoop()
	before, _ := w.Stats()
	use0, _ := w.Use()
	machine0 := testenv.ReadCPU(b)
	const size = 64
	sent, err := tctest.SendUDP(context.Background(), lab, tctest.UDPStream{From: "h0",
		To: netip.AddrPortFrom(lab.Host("h1").Addr(), 9200), Rate: kpps * 1e3 * size * 8, Size: size, Duration: 2 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	after, _ := w.Stats()
	use1, _ := w.Use()
	machine, _ := testenv.ReadCPU(b).Since(machine0)
	if err := w.Err(); err != nil {
		b.Fatalf("%g kpps: the delay loop stopped: %v", kpps, err)
	}
	d := after.Since(before)
	got := len(sink.Received())
	n := float64(max(d.Released(), 1))
	use := use1.Since(use0)
	cpuPerPkt := float64(use.CPU.Nanoseconds()) / n / 1e3
	verdictPerPkt := float64(use.Verdict.Nanoseconds()) / n / 1e3
	b.Logf("%3.0f kpps offered: %6d sent, %6d received (%.1f kpps), lateness p50 %v p99 %v max %v, unasked drops %d, loop CPU %.2f µs/packet of which %.2f in verdicts (forwarding), %.2f turns/packet, out of real time %v; steal %.1f %%",
		kpps, sent, got, float64(got)/2/1e3, d.Lateness(0.5), d.Lateness(0.99), d.MaxLateness(), d.Totals().Overflow, cpuPerPkt, verdictPerPkt, float64(use.Turns)/n, d.Demoted, machine.StealPct)
	tag := fmt.Sprintf("%gkpps", kpps)
	b.ReportMetric(float64(got)/2/1e3, "kpps-received@"+tag)
	b.ReportMetric(float64(d.Lateness(0.99).Microseconds()), "µs-p99-late@"+tag)
	b.ReportMetric(cpuPerPkt, "µs-cpu/pkt@"+tag)
	b.ReportMetric(max(cpuPerPkt-verdictPerPkt, 0), "µs-own-cpu/pkt@"+tag)
	b.ReportMetric(machine.StealPct, "steal-%@"+tag)
}
