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
	"github.com/fabric-emu/fabric/results/flows"
	"github.com/fabric-emu/fabric/results/lmm"
	"github.com/fabric-emu/fabric/results/stats"
)

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
	// ProbeLatencyUS is the probe stream's switch latency, when the LMM
	// summarised it (lmm.Result.Probe): the queue sampled at fixed times,
	// as HULL's LMM reported it. ProbesLost are probes the switch dropped.
	ProbeLatencyUS *stats.Summary `json:"probe_latency_us,omitempty"`
	ProbesLost     int64          `json:"probes_lost,omitempty"`

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
