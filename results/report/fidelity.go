package report

import (
	"encoding/json"

	"github.com/fabric-emu/fabric/internal/cpustat"
	"github.com/fabric-emu/fabric/results/flows"
	"github.com/fabric-emu/fabric/tc/delay"
)

// Fidelity says whether a trial's numbers can be believed: the one record
// of it, written by the runner as the trial's fidelity.json and in its
// meta.json, and judged by Faithful alone. The runner fills what it
// measured during the traffic; LoadTrial adds what the trial's files say
// (capture drops, LMM losses, incomplete flows, the tail in flight while
// the CPU was saturated).
type Fidelity struct {
	// CaptureDrops is the sum of every capture's ring drops: a capture with
	// drops cannot measure every packet.
	CaptureDrops uint64 `json:"capture_drops"`
	// CPUSamples counts the runner's CPU samples over the traffic, and
	// CPUBusyFrac the share of them below the idle floor.
	CPUSamples  int     `json:"cpu_samples,omitempty"`
	CPUBusyFrac float64 `json:"cpu_busy_fraction,omitempty"`
	// CPUSaturated is set by the runner when the CPU had less than 20% idle
	// for more than 10% of the run (issue 7's rule).
	CPUSaturated bool `json:"cpu_saturated"`
	// MinCPUIdlePct is the lowest CPU idle percentage sampled, if known.
	MinCPUIdlePct float64 `json:"min_cpu_idle_pct,omitempty"`
	// CPUStealPct is the share of the CPU the hypervisor took during the
	// traffic (steal time), if known: the cause a reader needs when
	// lateness or saturation come with it, and a verdict of its own where
	// an open-loop port cannot hide it (StealHarm).
	CPUStealPct float64 `json:"cpu_steal_pct,omitempty"`
	// CPUConsumers is what took the machine's CPU (meta.json's account
	// has it all); a trial flagged for CPU names them in its advice.
	CPUConsumers *CPUConsumers `json:"cpu_consumers,omitempty"`
	// RateAchievedFraction is the lowest achieved/expected rate of the
	// watched ports when below 1, if the runner measured it (0 when
	// unknown), and Ports what each watched port achieved.
	RateAchievedFraction float64    `json:"rate_achieved_fraction,omitempty"`
	Ports                []PortRate `json:"ports,omitempty"`
	// LMMUnmatched is how many packets the switch dropped (seen at ingress,
	// never left); not a fidelity problem in itself, but reported.
	LMMUnmatched int64 `json:"lmm_unmatched"`
	// DelayLines is how the lab's delay lines kept their delays.
	// DelayLinesUnfaithful is their verdict in meta.json files written
	// before meta.json carried DelayLines; the judge reads either.
	DelayLines           *DelayFidelity `json:"delay_lines,omitempty"`
	DelayLinesUnfaithful bool           `json:"delay_lines_unfaithful,omitempty"`
	// BacklogDrops is how many packets the kernel's per-CPU input backlogs
	// dropped during the traffic (/proc/net/softnet_stat): a burst handed
	// to one CPU faster than it drains, as a delay line can when it
	// releases at once what a stall held back. No counter of the lab sees
	// them.
	BacklogDrops uint64 `json:"backlog_drops,omitempty"`
	// CPUSaturatedSpans are the stretches of the traffic (CLOCK_REALTIME
	// ns) in which the runner's samples found the CPU below its idle
	// floor. From them and the records the loader computes CPUTail: per
	// group (all flows, each class), how much of the slowdown tail was in
	// flight during those stretches (flows.TailExposure). CPUTailDistorted
	// is set when more than a quarter of some group's tail was: a tail the
	// machine may have made, which the rule on the share of saturated
	// samples (CPUSaturated) lets pass when the stretches are short.
	CPUSaturatedSpans []flows.Interval     `json:"cpu_saturated_spans,omitempty"`
	CPUTail           []flows.TailExposure `json:"cpu_tail,omitempty"`
	CPUTailDistorted  bool                 `json:"cpu_tail_distorted,omitempty"`
	// NDP is what the lab's trimming ports did (NDP mode): counted, not
	// judged, since trims and header drops are the network's behaviour.
	NDP *NDPFidelity `json:"ndp,omitempty"`
	// PacerErrors and EndpointErrors are what the pacers' controllers and
	// the hosts' endpoints reported.
	PacerErrors    []string `json:"pacer_errors,omitempty"`
	EndpointErrors []string `json:"endpoint_errors,omitempty"`
	// IncompleteFlows were cut off or failed.
	IncompleteFlows int `json:"incomplete_flows"`
	// Advice is how to make an unfaithful trial believable.
	Advice string   `json:"advice,omitempty"`
	Notes  []string `json:"notes,omitempty"`
}

// MarshalJSON writes the record with its verdict (unfaithful: not
// Faithful) for readers of the files; the verdict is derived, never kept,
// so it cannot fall behind what was added to the record.
func (f Fidelity) MarshalJSON() ([]byte, error) {
	type plain Fidelity
	return json.Marshal(struct {
		plain
		Unfaithful bool `json:"unfaithful"`
	}{plain(f), !f.Faithful()})
}

// UnmarshalJSON reads a fidelity record, including the names earlier runs
// wrote: rate_shortfall for RateAchievedFraction, and fidelity.json's
// cpu_min_idle_pct for MinCPUIdlePct.
func (f *Fidelity) UnmarshalJSON(b []byte) error {
	type plain Fidelity
	var v struct {
		plain
		OldRate    float64  `json:"rate_shortfall"`
		OldMinIdle *float64 `json:"cpu_min_idle_pct"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*f = Fidelity(v.plain)
	if f.RateAchievedFraction == 0 {
		f.RateAchievedFraction = v.OldRate
	}
	if v.OldMinIdle != nil && f.MinCPUIdlePct == 0 {
		f.MinCPUIdlePct = *v.OldMinIdle
	}
	return nil
}

// NotableSteal says whether the hypervisor took enough of the CPU during
// the trial to name it.
func (f Fidelity) NotableSteal() bool { return f.CPUStealPct >= cpustat.NotableStealPct }

// Faithful is false when the trial should not be believed: the CPU could
// not keep up, the captures missed packets, the delay lines were late or
// lost packets, the kernel dropped some no counter saw, or the hypervisor
// stopped an open-loop port for too much of its traffic. It is fabric's
// one judge of a trial.
func (f Fidelity) Faithful() bool {
	return !f.CPUSaturated && f.CaptureDrops == 0 && !f.delayLinesLate() && f.BacklogDrops == 0 && !f.CPUTailDistorted && !f.Stolen()
}

// StealHarm is the share of the traffic that the hypervisor's steal can
// have perturbed at the busiest watched port fed open-loop (Poisson
// packets, dynamic flows: 0 < ExpectedBPS < ConfiguredBPS), and that
// port's load. A stall of length L stops the port while arrivals keep
// their times, so it ends with a backlog of ρL of work, which drains at
// 1 − ρ: the port is behind its unstolen self for L/(1 − ρ), and a share
// σ of stolen time perturbs at most σ/(1 − ρ) of the run. Closed-loop
// flows stop with the port and keep its queue, so their ports are not
// counted (their harm shows as late lines or saturation).
func (f Fidelity) StealHarm() (share, load float64) {
	p, ok := f.openLoopPort()
	if !ok {
		return 0, 0
	}
	load = p.ExpectedBPS / p.ConfiguredBPS
	return f.CPUStealPct / 100 / (1 - load), load
}

// CarriedLoad is the share of its rate that the busiest watched port fed
// open-loop carried (false when there is none): the load a trial measured
// at, which a short trial's draw of large messages can put well off the
// load it asked for.
func (f Fidelity) CarriedLoad() (float64, bool) {
	p, ok := f.openLoopPort()
	if !ok || p.AchievedBPS <= 0 {
		return 0, false
	}
	return p.AchievedBPS / p.ConfiguredBPS, true
}

// openLoopPort is the watched port fed open-loop (0 < ExpectedBPS <
// ConfiguredBPS) with the highest expected load.
func (f Fidelity) openLoopPort() (PortRate, bool) {
	var best PortRate
	for _, p := range f.Ports {
		if p.ExpectedBPS > 0 && p.ExpectedBPS < p.ConfiguredBPS &&
			(best.ConfiguredBPS == 0 || p.ExpectedBPS/p.ConfiguredBPS > best.ExpectedBPS/best.ConfiguredBPS) {
			best = p
		}
	}
	return best, best.ConfiguredBPS > 0
}

// Stolen says the steal perturbed more of an open-loop port's traffic than
// the CPU-saturation rule lets a busy CPU perturb (cpustat.SaturatedShare).
func (f Fidelity) Stolen() bool {
	share, _ := f.StealHarm()
	return share > cpustat.SaturatedShare
}

func (f Fidelity) delayLinesLate() bool { return f.DelayLinesUnfaithful || f.DelayLines.Unfaithful() }

// Flags is a short text for tables: "ok", or what went wrong.
func (f Fidelity) Flags() string {
	var s []string
	if f.CPUSaturated {
		s = append(s, "cpu-saturated")
	}
	if f.CPUTailDistorted {
		s = append(s, "cpu-tail")
	}
	if f.CaptureDrops > 0 {
		s = append(s, "capture-drops")
	}
	if f.delayLinesLate() {
		s = append(s, "delay-lines")
	}
	if f.BacklogDrops > 0 {
		s = append(s, "backlog-drops")
	}
	if f.Stolen() {
		s = append(s, "steal")
	}
	if len(s) == 0 {
		return "ok"
	}
	out := s[0]
	for _, x := range s[1:] {
		out += "+" + x
	}
	return out
}

// PortRate is a port's achieved rate over the traffic phase of a trial,
// from its tc byte counters, next to its configured rate.
type PortRate struct {
	Port          string  `json:"port"`
	ConfiguredBPS float64 `json:"configured_bps"`
	AchievedBPS   float64 `json:"achieved_bps"`
	// ExpectedBPS is what the traffic should have pushed through it: the
	// configured rate for long-lived flows, load × rate for dynamic.
	ExpectedBPS float64 `json:"expected_bps"`
	Drops       uint64  `json:"drops"`
	// ECT and Marks count ECN-capable packets and CE marks set by the
	// port's marker (threshold or phantom queue) over the same interval.
	ECT   uint64 `json:"ect,omitempty"`
	Marks uint64 `json:"marks,omitempty"`
}

// DelayFidelity is what the delay lines did during a trial's traffic.
type DelayFidelity struct {
	Lines   int    `json:"lines"`
	Packets uint64 `json:"packets"`
	Lost    uint64 `json:"lost"` // dropped because a link's loss asked
	// Unasked counts packets the lines dropped without being asked (a full
	// queue): any makes the trial unfaithful.
	Unasked uint64 `json:"unasked_drops"`
	// Lateness beyond each packet's delay, µs.
	LatenessP50US float64 `json:"lateness_p50_us"`
	LatenessP99US float64 `json:"lateness_p99_us"`
	LatenessMaxUS float64 `json:"lateness_max_us"`
	// LimitUS is the p99 lateness above which the trial is unfaithful:
	// max(10 % of the shortest delay, 50 µs).
	LimitUS float64 `json:"limit_us"`
	Late    bool    `json:"late"`
	// LoopCPUPerPacketUS is the lines' thread's CPU per packet, µs.
	LoopCPUPerPacketUS float64 `json:"loop_cpu_per_packet_us"`
	// VerdictUSPerPacket is the part of it spent in verdicts, the kernel
	// forwarding each released packet on (and whatever that packet sets
	// off on the same CPU); TurnsPerPacket is the loop's turns (each a
	// wake-up or a spin to a release) per packet. The rest of the CPU is
	// the loop's own: its wake-ups, spins and bookkeeping.
	VerdictUSPerPacket float64 `json:"verdict_us_per_packet,omitempty"`
	TurnsPerPacket     float64 `json:"turns_per_packet,omitempty"`
	// LoopCPUStealPct is the share of the lines' CPU (delay.LoopCPU, the CPU they run on) that
	// the hypervisor took during the traffic: while it runs something
	// else there, every release due meanwhile is late. -1: unknown (the
	// lines may run on any CPU).
	LoopCPUStealPct float64 `json:"loop_cpu_steal_pct"`
	// LoopClass is the lines' thread's scheduling class: "realtime", or
	// "normal" where the kernel refused real time (without CAP_SYS_NICE);
	// its wake-ups then wait behind whatever runs on its CPU. DemotedMS is
	// how long a real-time loop left real time during the traffic because
	// it was saturated.
	LoopClass string  `json:"loop_class,omitempty"`
	DemotedMS float64 `json:"demoted_ms,omitempty"`
	// FullFrameUS is an MTU-sized packet's time on the delayed link where
	// it is shortest, µs, and FullFrameRateMbps that link's rate: a burst's
	// packets fall due a frame apart, and a loop that takes longer per
	// packet falls behind within it.
	FullFrameUS       float64 `json:"full_frame_us,omitempty"`
	FullFrameRateMbps float64 `json:"full_frame_rate_mbps,omitempty"`
	// Machine is how late the idle machine let a loop be, measured once a
	// run before the first delayed lab carried traffic: when its floor
	// exceeds the limit, the lateness is at the machine's own noise.
	Machine *delay.MachineTiming `json:"machine,omitempty"`
}

// Unfaithful says whether the lines make the trial unfaithful: late at the
// 99th percentile, or dropping packets nobody asked them to.
func (d *DelayFidelity) Unfaithful() bool { return d != nil && (d.Late || d.Unasked > 0) }

// NDPFidelity sums the trimming counters of every NDP switch port of a
// trial's lab over its traffic (tc.NDPStats): how much the fabric trimmed,
// and the header drops that NDP's receivers must recover by timeout.
type NDPFidelity struct {
	Ports       int    `json:"ports"`
	Trimmed     uint64 `json:"trimmed"`
	HeaderDrops uint64 `json:"header_drops"`
	DataDrops   uint64 `json:"data_drops"`
	// DataQueueMax is the largest data queue any port reached, packets.
	DataQueueMax uint64 `json:"data_queue_max_packets"`
}

// CPUConsumers is what took a trial's CPU, from its account (CPUAccount).
type CPUConsumers struct {
	// Largest are the parts that took the most while the CPU was below
	// the idle floor (over the whole traffic when it never was), largest
	// first.
	Largest []CPUPart `json:"largest"`
	// BusiestHost is the host whose transport took the most over the
	// traffic, and OtherProcessesPct what every process outside the trial
	// took (nil when unknown).
	BusiestHost       *CPUPart `json:"busiest_host,omitempty"`
	OtherProcessesPct *float64 `json:"other_processes_pct,omitempty"`
}
