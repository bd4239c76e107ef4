// Package report turns trials into HULL-style tables (Table 4's shape:
// scheme × load, with switch latency avg/90th/99th, 1KB FCT avg/99th and
// 10MB FCT avg), a per-trial summary.csv, and plots.
//
// The experiment runner fills a TrialSummary per trial, or LoadTrial reads
// one back from a trial directory of the run layout
//
//	runs/NAME/TIMESTAMP/POINT/trial-N/
//	    meta.json             scheme, load, ideal (bottleneck rate, unloaded RTT), fidelity
//	    records-*.jsonl       the transports' records (package hosts/transport)
//	    lmm/NAME.summary.json LMM counts and statistics (lmm.Measure)
//	    lmm/NAME.cdf.csv      LMM latency CDF
//	    lmm/NAME.packets.csv  LMM per-packet latencies
//	    **/*.stats.json       capture statistics (capture drops)
package report

import (
	"encoding/json"

	"github.com/fabric-emu/fabric/results/flows"
	"github.com/fabric-emu/fabric/results/lmm"
	"github.com/fabric-emu/fabric/results/stats"
)

// Fidelity says whether a trial's numbers can be believed. The runner fills
// CPU figures; LoadTrial fills capture drops, LMM losses and incomplete
// flows from the trial's files.
type Fidelity struct {
	// CaptureDrops is the sum of every capture's ring drops: a capture with
	// drops cannot measure every packet.
	CaptureDrops uint64 `json:"capture_drops"`
	// CPUSaturated is set by the runner when the CPU had less than 20% idle
	// for more than 10% of the run (issue 7's rule).
	CPUSaturated bool `json:"cpu_saturated"`
	// MinCPUIdlePct is the lowest CPU idle percentage sampled, if known.
	MinCPUIdlePct float64 `json:"min_cpu_idle_pct,omitempty"`
	// CPUStealPct is the share of the CPU the hypervisor took during the
	// traffic (steal time), if known: not a verdict of its own, since its
	// harm shows as lateness or saturation, but the cause a reader needs
	// when those flags come with it.
	CPUStealPct float64 `json:"cpu_steal_pct,omitempty"`
	// RateAchievedFraction is the lowest achieved/expected rate of the
	// watched ports when below 1, if the runner measured it (0 when
	// unknown). Runs before it had this name wrote it as rate_shortfall,
	// which UnmarshalJSON still reads.
	RateAchievedFraction float64 `json:"rate_achieved_fraction,omitempty"`
	// LMMUnmatched is how many packets the switch dropped (seen at ingress,
	// never left); not a fidelity problem in itself, but reported.
	LMMUnmatched int64 `json:"lmm_unmatched"`
	// DelayLinesUnfaithful is set when the lab's delay lines released
	// packets too late or dropped some nobody asked them to.
	DelayLinesUnfaithful bool `json:"delay_lines_unfaithful,omitempty"`
	// BacklogDrops is how many packets the kernel's per-CPU input backlogs
	// dropped during the traffic (netdev_max_backlog): lost packets no
	// port or line counted.
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
	// IncompleteFlows were cut off or failed.
	IncompleteFlows int      `json:"incomplete_flows"`
	Notes           []string `json:"notes,omitempty"`
}

// UnmarshalJSON reads a fidelity record, including the old name of
// RateAchievedFraction (rate_shortfall, which held the same value).
func (f *Fidelity) UnmarshalJSON(b []byte) error {
	type plain Fidelity
	var v struct {
		plain
		OldRate float64 `json:"rate_shortfall"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*f = Fidelity(v.plain)
	if f.RateAchievedFraction == 0 {
		f.RateAchievedFraction = v.OldRate
	}
	return nil
}

// NotableStealPct is the hypervisor's share of the CPU from which a report
// names it next to a trial: below it, timing and rate checks on fabric's
// own virtual machine kept their margins.
const NotableStealPct = 2.0

// NotableSteal says whether the hypervisor took enough of the CPU during
// the trial to name it.
func (f Fidelity) NotableSteal() bool { return f.CPUStealPct >= NotableStealPct }

// Faithful is false when the trial should not be believed: the CPU could
// not keep up or the capture missed packets.
func (f Fidelity) Faithful() bool {
	return !f.CPUSaturated && f.CaptureDrops == 0 && !f.DelayLinesUnfaithful && f.BacklogDrops == 0 && !f.CPUTailDistorted
}

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
	if f.DelayLinesUnfaithful {
		s = append(s, "delay-lines")
	}
	if f.BacklogDrops > 0 {
		s = append(s, "backlog-drops")
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

// TrialSummary is one trial's results: a plain struct the experiment runner
// can fill directly. Statistics are in the units their names say; a nil
// pointer means "not measured in this trial".
type TrialSummary struct {
	// Scheme is the row label (the scheme and its non-load sweep values)
	// and SchemeName the scheme alone (empty in runs from before it was
	// recorded).
	Scheme     string `json:"scheme"`
	SchemeName string `json:"scheme_name,omitempty"`
	// Pattern is the traffic pattern and Paper the published table the
	// experiment reproduces, which choose the report's tables.
	Pattern string `json:"pattern,omitempty"`
	Paper   string `json:"paper,omitempty"`
	// Sweep is the point's swept values other than the scheme, and
	// PointIndex the point's place in the experiment's sweep.
	Sweep      []SweepValue `json:"sweep,omitempty"`
	PointIndex int          `json:"point_index,omitempty"`
	Load       float64      `json:"load"` // offered load as a fraction of the bottleneck (0.4 = 40%)
	Point      string       `json:"point"`
	Trial      int          `json:"trial"`
	Dir        string       `json:"dir,omitempty"`
	// ScaleFactor is the scaling rule's s for this trial (Meta.ScaleFactor).
	ScaleFactor float64 `json:"scale_factor,omitempty"`
	// PaperUnits says its times and rates are the paper's already
	// (Meta.PaperUnits), ScheduleStartNS and Predicted are Meta's.
	PaperUnits      bool       `json:"paper_units,omitempty"`
	ScheduleStartNS int64      `json:"-"`
	Predicted       *Predicted `json:"predicted,omitempty"`
	Machine         *Machine   `json:"machine,omitempty"`

	SwitchLatencyUS *stats.Summary `json:"switch_latency_us,omitempty"`
	LMM             *lmm.Counts    `json:"lmm,omitempty"`

	FCT1KBUS    *stats.Summary `json:"fct_1kb_us,omitempty"`
	FCT10MBUS   *stats.Summary `json:"fct_10mb_us,omitempty"`
	SlowdownAll *stats.Summary `json:"slowdown_all,omitempty"`
	// ShortHalf is the slowdown of the shortest 50 % of flows by count,
	// and Spectrum the slowdown spectrum (results/flows), when measured.
	ShortHalf     *stats.Summary      `json:"slowdown_short_half,omitempty"`
	Spectrum      []flows.SpectrumBin `json:"spectrum,omitempty"`
	QCTUS         *stats.Summary      `json:"qct_us,omitempty"`
	ThroughputMbp *stats.Summary      `json:"throughput_mbps,omitempty"`
	// Utilization and Jain are the long-lived flows' use of their
	// receivers' links and Jain's fairness index (flows.Throughput);
	// PerFlowMbps every flow's throughput, ascending.
	Utilization float64   `json:"utilization,omitempty"`
	Jain        float64   `json:"jain,omitempty"`
	PerFlowMbps []float64 `json:"-"`
	// SizeSlowdown is the slowdown per flow-size range (flows.SizeBuckets).
	SizeSlowdown []flows.BucketStats `json:"size_slowdown,omitempty"`
	// Classes are the traffic classes' slowdowns and SLOs, when the
	// experiment has classes (or the records carry them).
	Classes []ClassResult `json:"classes,omitempty"`
	// Metrics are what the transport counted itself (metric records).
	Metrics []MetricValue `json:"metrics,omitempty"`

	Fidelity Fidelity `json:"fidelity"`
	// CPU is where the CPU went during the traffic, when sampled.
	CPU *CPUAccount `json:"-"`

	// Distributions for plots (not in summary.csv).
	LatencyCDF []stats.Point `json:"-"` // switch latency, µs
	FCT1KBCDF  []stats.Point `json:"-"` // µs
	QCTCDF     []stats.Point `json:"-"` // µs
	Throughput []TimeSeries  `json:"-"`
}

// SweepValue is one swept key's value at a point, as the report shows it.
type SweepValue struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// TimeSeries is one flow's throughput over time.
type TimeSeries struct {
	Label   string
	Seconds []float64
	Mbps    []float64
}
