package homa_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fabric-emu/fabric/experiments"
	"github.com/fabric-emu/fabric/hosts"
	"github.com/fabric-emu/fabric/hosts/transport/homa"
	"github.com/fabric-emu/fabric/hosts/transport/transporttest"
	"github.com/fabric-emu/fabric/hosts/workload"
	"github.com/fabric-emu/fabric/internal/testenv"
	"github.com/fabric-emu/fabric/results/pcapfile"
)

// The tests run Homa as fabric runs it: `fabric transport homa` on every
// host of a real lab with 8-band ports, started by an experiment.

func TestMain(m *testing.M) { testenv.RunWithFabric(m, hosts.EnvFabricBinary) }

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
	spec, err := experiments.Parse(t.Name()+".yaml", fmt.Appendf(nil, `name: homa-lossy
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
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := experiments.Run(ctx, spec, experiments.Options{Out: t.TempDir(), LabPrefix: fmt.Sprintf("thm%d", os.Getpid()%10000), Seed: 3, KeepPcaps: true})
	if err != nil {
		t.Fatal(err)
	}
	trial := res.Trials[0].Dir
	sched, set := transporttest.ReadTrial(t, trial)
	if len(sched) < 30 {
		t.Fatalf("only %d messages scheduled", len(sched))
	}
	transporttest.DeliveredOnce(t, sched, set, nil)
	cdf, err := workload.Load(cdfFile)
	if err != nil {
		t.Fatal(err)
	}
	prio := homa.PrioritiesFor(cdf, rttBytes, 1500-20-8-homa.HeaderLen, levels)
	checkPriorities(t, filepath.Join(trial, "captures"), prio, rttBytes)
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
