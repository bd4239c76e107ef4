package experiments

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fabric-emu/fabric/hosts/transport/homa"
	"github.com/fabric-emu/fabric/hosts/transport/transporttest"
	"github.com/fabric-emu/fabric/hosts/workload"
	"github.com/fabric-emu/fabric/internal/testenv"
	"github.com/fabric-emu/fabric/results/pcapfile"
)

// The Homa lab tests run Homa as fabric runs it: `fabric transport homa`
// on every host of a real lab with 8-band ports, started by an experiment.

// sizesCDF is every size class from 1 byte to 3 MB.
const sizesCDF = "# discrete: true\n1 0.2\n700 0.4\n5000 0.6\n40000 0.8\n300000 0.95\n3000000 1\n"

// Messages from 1 byte to 3 MB, from three senders to one receiver,
// cross links that lose 1 % of packets in each direction (data, grants and
// DONEs alike): each is delivered exactly once, whole, and every data
// packet at the switch carries its Homa priority as its DSCP, the
// unscheduled ones at the level the workload's cut-offs give their
// remaining size.
func TestLossyLabDeliversOnceWithPrioritiesOnTheWire(t *testing.T) {
	testenv.RequireRoot(t)
	dir := t.TempDir()
	cdfFile := filepath.Join(dir, "sizes.cdf")
	if err := os.WriteFile(cdfFile, []byte(sizesCDF), 0o644); err != nil {
		t.Fatal(err)
	}
	const rttBytes, levels = 15000, 3
	spec, err := Parse(t.Name()+".yaml", fmt.Appendf(nil, `name: homa-lossy
lab: {name: homal, topology: {kind: star, hosts: 4}, links: {rate: 50Mbit, delay: 200us, loss: 0.01}}
schemes:
  homa: {transport: homa, args: {rtt_bytes: %d, unsched_levels: %d, resend_after: 5ms}, ports: {queues: {bands: 8}, buffer: 500KB}}
traffic: {pattern: dynamic, workload: %s, load: 0.3, client: h0, servers: rest}
duration: 5s
measure: {lmm: {switch: s0, from: [eth1, eth2, eth3], to: eth0}}
`, rttBytes, levels, cdfFile), dir)
	if err != nil {
		t.Fatal(err)
	}
	// The cut-offs for this CDF, worked by hand (each level carries a third
	// of the unscheduled bytes, 1448-byte payloads, 15000 RTT bytes): the
	// masses by remaining size are 1 B 0.2, 656 131.2, 700 140, 2104 /
	// 3552 / 5000 289.6 each, 40 KB's eleven packets (25520–40000) 289.6
	// each, 300 KB's (285520–300000) 217.2, 3 MB's 72.4, in all 7511.4;
	// the running sum comes nearest 2503.8 at 31312 (2588.2) and 5007.6
	// at 288416 (4977.4).
	want := homa.Priorities{Unscheduled: levels, Cutoffs: []int64{31312, 288416}}
	cdf, err := workload.Load(cdfFile)
	if err != nil {
		t.Fatal(err)
	}
	if got := homa.PrioritiesFor(cdf, rttBytes, 1500-20-8-homa.HeaderLen, levels); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("PrioritiesFor = %+v, want %+v", got, want)
	}
	// A message still in flight when the drain ends was either lost by
	// Homa or held back by a stalled machine; only the trial's fidelity
	// record tells them apart.
	testenv.Retry(t, 2, 0, func(a *testenv.Attempt) {
		res := runOnce(t, spec, Options{Seed: 3, KeepPcaps: true}, 3*time.Minute)
		a.Flagged(res.Trials[0].Dir, res.Trials[0].Fidelity)
		trial := res.Trials[0].Dir
		sched, set := transporttest.ReadTrial(t, trial)
		if len(sched) < 30 {
			t.Fatalf("only %d messages scheduled", len(sched))
		}
		transporttest.DeliveredOnce(a, sched, set, nil)
		checkPriorities(t, filepath.Join(trial, "captures"), want, rttBytes)
	})
}

// checkPriorities reads every captured Homa data packet: its DSCP must be
// CS<priority in its header>, and an unscheduled packet's priority the one
// the cut-offs give its message's remaining size.
func checkPriorities(t *testing.T, dir string, prio homa.Priorities, rttBytes int64) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*.pcap"))
	if len(files) == 0 {
		t.Fatalf("no captures in %s", dir)
	}
	levels := map[uint8]int{}
	data := 0
	for _, f := range files {
		r, err := pcapfile.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		for {
			p, err := r.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			b := p.Data
			// Ethernet 14, IPv4 20 (no options), UDP 8, then Homa's header.
			if len(b) < 14+20+8+homa.HeaderLen || b[23] != 17 || binary.BigEndian.Uint16(b[36:]) != homa.DefaultPort {
				continue
			}
			tos, h := b[15], b[42:]
			if h[0] != 1 { // DATA
				continue
			}
			data++
			hp := h[1]
			if tos>>5 != hp {
				t.Fatalf("%s: data packet at priority %d has TOS %#x", f, hp, tos)
			}
			size, off := int64(binary.BigEndian.Uint32(h[12:])), int64(binary.BigEndian.Uint32(h[16:]))
			if off < rttBytes && hp != prio.Unsched(size-off) {
				t.Fatalf("%s: unscheduled packet of a %d B message at offset %d has priority %d, want %d (cut-offs %v)",
					f, size, off, hp, prio.Unsched(size-off), prio.Cutoffs)
			}
			levels[hp]++
		}
		r.Close()
	}
	t.Logf("%d data packets captured; per priority: %v; cut-offs %v", data, levels, prio.Cutoffs)
	if len(levels) < 4 {
		t.Errorf("data used only priorities %v: want the 3 unscheduled levels and scheduled ones", levels)
	}
}
