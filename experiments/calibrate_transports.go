package experiments

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/fabric-emu/fabric/experiments/cost"
	"github.com/fabric-emu/fabric/internal/units"
	"github.com/fabric-emu/fabric/results/report"
)

// calibrationSpec is the transports' calibration: every built-in
// transport between two hosts through one switch, at 100 Mbit/s, the
// rate experiments here run at, but for the regime of sparse packets (a
// packet costs a transport more the further apart packets come, since
// more of them wake it), with a delay
// line towards each host as the paper scenarios have (its released
// packets are received on another CPU, RPSMask), one message of size
// every interval (the incast pattern with one worker).
const calibrationSpec = `name: calibrate
lab: {name: cal, topology: {kind: star, hosts: 2}, links: {rate: %s, delay: {down: 100us}}}
schemes:
  tcp:  {cc: cubic}
  homa: {transport: homa, ports: {queues: {bands: 8}}}
  ndp:  {transport: ndp, ports: {ndp: {}}}
traffic: {pattern: incast, client: h0, servers: rest, size: %s, interval: %s}
duration: %s
`

// calRegimes are the kinds of traffic the transports' trials carry: many
// one-packet messages, whose cost is mostly the messages', fewer of 64 KB,
// mostly their packets' (the two solve cost = a·messages + b·packets),
// one-packet messages 20 ms apart, each of which finds both its ends
// idle and wakes them (what that costs beyond a busy message's is the
// transport's WakeUS), and 64 KB messages at 5 Mbit/s, whose 1500-byte
// packets come 2.4 ms apart, more than cost.HostIdleGap, so that each
// wakes its ends (SparsePacketUS).
var calRegimes = []struct {
	size     units.Size
	interval time.Duration
	rate     units.Rate
}{
	{100, 250 * time.Microsecond, 100 * units.Mbit},
	{64 * units.KB, 8 * time.Millisecond, 100 * units.Mbit},
	{100, 20 * time.Millisecond, 100 * units.Mbit},
	{64 * units.KB, 150 * time.Millisecond, 5 * units.Mbit},
}

// calDrain is the transports' trials' drain: their messages take a
// millisecond at most.
const calDrain = 300 * time.Millisecond

// transportSample is one calibration trial of one transport: its messages
// and data packets and what the machine and the transports' processes
// spent from the schedule's start to the trial's end, the lab at rest
// and the switch's forwarding taken out, ns.
type transportSample struct {
	messages, packets float64
	machineNS         float64
	processNS         float64
}

// transports runs every built-in transport's calibration trials and fits
// each one's cost per message and per packet; it sets costs.Trial.FixedS
// from the trials' wall-clock time too.
func (c *calibration) transports(ctx context.Context, costs *cost.Costs) (map[string]cost.Transport, error) {
	dir, err := os.MkdirTemp("", "fabric-calibrate-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	samples := map[string][]transportSample{}
	var overhead []float64
	for i, rg := range calRegimes {
		d := c.phase * 3 / 2
		spec, err := Parse("calibration", fmt.Appendf(nil, calibrationSpec, rg.rate, rg.size, time.Duration(rg.interval), d), "")
		if err != nil {
			return nil, err
		}
		spec.drain = calDrain
		opts := Options{Out: dir, LabPrefix: c.opts.LabPrefix, Log: c.opts.Log, Progress: io.Discard}.withDefaults()
		r := &runner{spec: spec, opts: opts, run: &RunFile{Seed: 1, Fabric: BuildVersion(), Kernel: kernelRelease()}, dir: dir}
		for _, p := range spec.Points() {
			fmt.Fprintf(c.opts.Progress, "calibrate: transport %s, %s messages every %v at %s\n", p.Scheme, rg.size, rg.interval, rg.rate)
			s, fixed, err := c.transportTrial(ctx, r, p, filepath.Join(dir, fmt.Sprintf("%s-%d", p.Name, i)), costs)
			if err != nil {
				return nil, fmt.Errorf("calibrate: transport %s: %w", p.Scheme, err)
			}
			samples[p.Scheme] = append(samples[p.Scheme], s)
			overhead = append(overhead, fixed)
		}
	}
	out := map[string]cost.Transport{}
	for name, ss := range samples {
		m, p := solve2(ss[0].messages, ss[0].packets, ss[0].machineNS, ss[1].messages, ss[1].packets, ss[1].machineNS)
		pm, pp := solve2(ss[0].messages, ss[0].packets, ss[0].processNS, ss[1].messages, ss[1].packets, ss[1].processNS)
		woken := func(sample transportSample, msg, pkt float64, ns float64) float64 {
			return max((ns-pkt*sample.packets)/max(sample.messages, 1)-msg, 0)
		}
		wake, pwake := woken(ss[2], m, p, ss[2].machineNS), woken(ss[2], pm, pp, ss[2].processNS)
		// Each of the sparse regime's messages finds its ends idle too.
		sparse := func(sample transportSample, msg, wake, pkt, ns float64) float64 {
			return max((ns-sample.messages*(msg+wake))/max(sample.packets, 1), pkt)
		}
		// A sparse packet costs the machine its processes' extra only: the
		// rest of the regime's extra is the kernel's and the hypervisor's
		// waking of a halted CPU, which a lab busy enough to matter never
		// lets halt (priced in, ndp/permutation's plan came out 2.7 times
		// what its trials measured).
		psparse := sparse(ss[3], pm, pwake, pp, ss[3].processNS)
		out[name] = cost.Transport{MessageUS: m / 1e3, PacketUS: p / 1e3, ProcessMessageUS: pm / 1e3, ProcessPacketUS: pp / 1e3,
			WakeUS: wake / 1e3, ProcessWakeUS: pwake / 1e3,
			SparsePacketUS: (p + psparse - pp) / 1e3, ProcessSparsePacketUS: psparse / 1e3}
	}
	var sum float64
	for _, o := range overhead {
		sum += o
	}
	costs.Trial.FixedS = max(sum/float64(max(len(overhead), 1))-3*costs.Trial.NodeS, 0) // a star of two hosts: three nodes
	return out, nil
}

// transportTrial runs one calibration trial and returns what it cost and
// its wall-clock time beyond the schedule and the drain it waited,
// seconds.
func (c *calibration) transportTrial(ctx context.Context, r *runner, p Point, dir string, costs *cost.Costs) (transportSample, float64, error) {
	_, sum, err := r.trial(ctx, p, 1, dir)
	if err != nil {
		return transportSample{}, 0, err
	}
	var meta struct {
		Started, Finished time.Time
		Drained           string
		report.Meta
	}
	b, err := os.ReadFile(filepath.Join(dir, report.MetaFile))
	if err == nil {
		err = json.Unmarshal(b, &meta)
	}
	if err != nil {
		return transportSample{}, 0, err
	}
	if sum.CPU == nil {
		return transportSample{}, 0, fmt.Errorf("trial %s has no CPU account", p.Name)
	}
	sched, err := r.spec.Schedule(r.spec.graph, p, TrialSeed(r.run.Seed, p.Traffic, 1))
	if err != nil {
		return transportSample{}, 0, err
	}
	s := transportSample{messages: float64(sched.Len())}
	for i := range sched.Len() {
		s.packets += dataPackets(sched.Message(i).Size, 1500)
	}
	from := float64(meta.ScheduleStartNS-sum.CPU.StartNS) / 1e9
	machine, process, span := accountSince(sum.CPU, from)
	// Every packet, data or answer, crosses the switch and one delay line
	// (the one towards its receiver): what those cost is the lab's, the
	// delay loop's turns as it counted them (per packet released, times
	// the packets that arrived: the same, on these lossless, drained lines).
	crossing := s.packets * (1 + answers(r.spec.schemeAt(p).Transport.Name(), false))
	var turns float64
	if d := sum.Fidelity.DelayLines; d != nil {
		turns = d.TurnsPerPacket * float64(d.Packets)
	}
	lab := costs.RestPct/100*span*float64(sum.CPU.CPUs)*1e9 + (costs.HopUS+costs.DelayPacketUS)*1e3*crossing +
		costs.DelayTurnUS*1e3*turns
	s.machineNS = machine - lab
	s.processNS = process
	// The processes' time is part of the machine's: a machine figure
	// below it has had too much taken out for the other processes (one
	// that exits moves its whole time into its parent's at once).
	s.machineNS = max(s.machineNS, process)
	c.opts.Log.Debug("calibrate: transport trial", "point", p.Name, "messages", s.messages, "packets", s.packets,
		"machine_ms", machine/1e6, "net_ms", s.machineNS/1e6, "process_ms", process/1e6, "span_s", span)
	drained, err := time.ParseDuration(meta.Drained)
	if err != nil {
		return transportSample{}, 0, fmt.Errorf("trial %s: drained: %w", p.Name, err)
	}
	return s, (meta.Finished.Sub(meta.Started) - r.spec.Duration - drained).Seconds(), nil
}

// accountSince sums an account's samples that end after from (seconds on
// its clock): the machine's busy time less steal and a pro-rata share of
// the other processes' (ns), the transports' processes' (ns), and the
// span they cover (s).
func accountSince(a *report.CPUAccount, from float64) (machineNS, processNS, span float64) {
	tick := 1e9 / float64(a.TicksPerSecond)
	prev := 0.0
	var total float64
	for _, s := range a.Samples {
		d := s.Seconds - prev
		total += d
		if s.Seconds > from {
			span += d
			wall := d * float64(a.CPUs*a.TicksPerSecond)
			machineNS += max(wall-float64(s.Idle)-float64(s.Steal), 0) * tick
			processNS += float64(s.Transports) * tick
		}
		prev = s.Seconds
	}
	if a.Others != nil && total > 0 {
		machineNS -= float64(*a.Others) * tick * span / total
	}
	return max(machineNS, 0), processNS, span
}

// solve2 solves y = a·x1 + b·x2 from two observations; a cost the two
// cannot tell apart, or that comes out below zero, goes to the other.
func solve2(x1, x2, y, u1, u2, v float64) (a, b float64) {
	det := x1*u2 - u1*x2
	if det != 0 {
		a, b = (y*u2-v*x2)/det, (x1*v-u1*y)/det
	}
	switch {
	case det == 0 || a < 0 && b < 0:
		return max((y+v)/max(x1+u1, 1), 0), 0
	case a < 0:
		return 0, max((y+v)/max(x2+u2, 1), 0)
	case b < 0:
		return max((y+v)/max(x1+u1, 1), 0), 0
	}
	return a, b
}

// dataPackets is how many packets a message of size bytes takes at mtu:
// its payload per packet is the MTU less 52 bytes of headers (IP, and
// TCP with timestamps or Homa's: within a few bytes of every built-in
// transport's), and even an empty message takes one.
func dataPackets(size int64, mtu int) float64 {
	return math.Max(math.Ceil(float64(size)/float64(max(mtu-52, 1))), 1)
}

// answers is how many packets come back for each data packet of a
// transport, which cross the same switches: TCP ACKs every second
// full-sized segment (RFC 1122 §4.2.3.2), or every one with quick ACKs
// (hosts.quickack); an NDP receiver ACKs every data packet and sends a
// PULL for each (Handley et al., SIGCOMM 2017, §3.2); a Homa receiver
// grants as data arrives, a GRANT per DATA packet of a scheduled message
// (Montazeri et al., SIGCOMM 2018, §3.3). Another transport is taken to
// answer like TCP.
func answers(transport string, quickack bool) float64 {
	switch transport {
	case "ndp":
		return 2
	case "homa":
		return 1
	}
	if quickack {
		return 1
	}
	return 0.5
}

// String is the build in one word, as a machine profile records it:
// its version, commit and whether its tree was modified.
func (v Version) String() string {
	s := v.Version
	if v.Commit != "" {
		s += "+" + v.Commit[:min(len(v.Commit), 12)]
	}
	if v.Modified {
		s += "-modified"
	}
	return s
}
