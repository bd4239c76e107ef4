package report

import (
	"fmt"
	"strings"

	"github.com/fabric-emu/fabric/results/stats"
)

// Predicted is what the run's cost model predicted for a trial before it
// ran (meta.json's predicted): the scale it ran at and why, its share of
// all the cores (mean, busiest 100 ms window), the share of windows
// below the fidelity monitor's idle floor, and the verdict.
type Predicted struct {
	Scale        float64 `json:"scale,omitempty"`
	Why          string  `json:"why,omitempty"`
	MeanPct      float64 `json:"mean_pct"`
	PeakPct      float64 `json:"peak_pct"`
	SaturatedPct float64 `json:"saturated_pct"`
	Verdict      string  `json:"verdict"`
	// Uncalibrated says a stand-in priced the transport.
	Uncalibrated bool `json:"uncalibrated,omitempty"`
}

// PlanEvent is a time the cost model was wrong during a run: a trial it
// predicted faithful was flagged, and what fabric did about it.
type PlanEvent struct {
	Trial   string   `json:"trial"` // "POINT trial N"
	Flags   string   `json:"flags"`
	Action  string   `json:"action"`
	Changes []string `json:"changes,omitempty"` // "load60: s 10 → 20"
}

// OwnShares is what the machine's CPU did for the trial from from
// (seconds on the account's clock) to its end, in percent of all the
// cores: the busy time less steal and the other processes (whose share is
// known over the whole account only, so taken evenly), mean and busiest
// sample. ok is false when no sample ends after from.
func (a *CPUAccount) OwnShares(from float64) (meanPct, peakPct float64, ok bool) {
	var others float64 // share of the cores, over the account
	if a.Others != nil && len(a.Samples) > 0 {
		if span := a.Samples[len(a.Samples)-1].Seconds; span > 0 {
			others = 100 * float64(*a.Others) / (span * float64(a.CPUs*a.TicksPerSecond))
		}
	}
	prev, n := 0.0, 0
	for _, s := range a.Samples {
		d := s.Seconds - prev
		prev = s.Seconds
		if s.Seconds <= from || d <= 0 {
			continue
		}
		wall := d * float64(a.CPUs*a.TicksPerSecond)
		pct := 100*(wall-float64(s.Idle)-float64(s.Steal))/wall - others
		meanPct += pct
		peakPct = max(peakPct, pct)
		n++
	}
	if n == 0 {
		return 0, 0, false
	}
	return meanPct / float64(n), peakPct, true
}

// MeasuredOwn is the trial's own share of the cores from its
// schedule's start (CPUAccount.OwnShares).
func (t *TrialSummary) MeasuredOwn() (meanPct, peakPct float64, ok bool) {
	if t.CPU == nil || t.ScheduleStartNS == 0 || t.CPU.StartNS == 0 {
		return 0, 0, false
	}
	return t.CPU.OwnShares(float64(t.ScheduleStartNS-t.CPU.StartNS) / 1e9)
}

// planSection is the report's "Plan against measurement": per trial the
// scale it ran at, the cost model's predicted share of the cores beside
// the measured one, the model's error, and the predicted verdict beside
// the monitor's. Runs without a plan get none.
func planSection(b *strings.Builder, trials []*TrialSummary) {
	planned := false
	for _, t := range trials {
		planned = planned || t.Predicted != nil
	}
	if !planned {
		return
	}
	b.WriteString("\n## Plan against measurement\n\n" +
		"Before the run, fabric's cost model priced every trial's schedule with this machine's calibrated costs " +
		"(`fabric doctor --calibrate`). Shares are of all the cores: predicted, what the trial costs the machine; measured, " +
		"its busy time less steal and the other processes', from the schedule's start through its drain; the error is " +
		"predicted over measured, less one. s is the time scale the trial ran at.\n\n" +
		"| point | trial | s | CPU mean predicted (%) | measured (%) | error | busiest window predicted (%) | measured (%) | predicted | measured |\n" +
		"|---|---:|---:|---:|---:|---:|---:|---:|---|---|\n")
	var why []string
	for _, t := range trials {
		p := t.Predicted
		if p == nil {
			continue
		}
		mean, peak, ok := t.MeasuredOwn()
		cells := []string{"–", "–", "–"}
		if ok {
			cells = []string{num(mean, 1), num(100*(p.MeanPct/mean-1), 0) + " %", num(peak, 1)}
		}
		measured := "faithful"
		if !t.Fidelity.Faithful() {
			measured = "flagged: " + t.Fidelity.Flags()
		}
		s := "–"
		if p.Scale > 0 {
			s = num(p.Scale, -1)
		}
		pred := num(p.MeanPct, 1)
		if p.Uncalibrated {
			pred += " (tcp's cost)"
		}
		fmt.Fprintf(b, "| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s |\n", t.Point, t.Trial, s, pred, cells[0], cells[1],
			num(p.PeakPct, 1), cells[2], p.Verdict, measured)
		if p.Why != "" && t.Trial == 1 {
			why = append(why, fmt.Sprintf("- %s: s = %s, %s", t.Point, s, p.Why))
		}
	}
	if len(why) > 0 {
		b.WriteString("\nWhy each point's s (scale auto):\n\n" + strings.Join(why, "\n") + "\n")
	}
}

// PlanEventsMarkdown lists the times the cost model was wrong during a
// run and what fabric did ("" when it never was).
func PlanEventsMarkdown(events []PlanEvent) string {
	if len(events) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("\n## When the cost model was wrong\n\n" +
		"A trial the plan predicted faithful was flagged; fabric measured the machine again and planned the points not yet " +
		"run with the new costs (a point that had started kept its s).\n\n")
	for _, e := range events {
		fmt.Fprintf(&b, "- %s, flagged %s: %s", e.Trial, e.Flags, e.Action)
		if len(e.Changes) > 0 {
			b.WriteString("; " + strings.Join(e.Changes, ", "))
		}
		b.WriteString(".\n")
	}
	return b.String()
}

// toPaperUnits turns a trial's times and rates measured at time scale s
// into the paper's: times divided by s, rates multiplied by it.
// Slowdowns, utilization and fairness have no unit and stay.
func (t *TrialSummary) toPaperUnits(s float64) {
	if s <= 0 || s == 1 {
		return
	}
	inv := 1 / s
	for _, sum := range []**stats.Summary{&t.SwitchLatencyUS, &t.ProbeLatencyUS, &t.FCT1KBUS, &t.FCT10MBUS, &t.QCTUS} {
		if *sum != nil {
			v := (*sum).Scale(inv)
			*sum = &v
		}
	}
	if t.ThroughputMbp != nil {
		v := t.ThroughputMbp.Scale(s)
		t.ThroughputMbp = &v
	}
	for i := range t.PerFlowMbps {
		t.PerFlowMbps[i] *= s
	}
	for _, cdf := range [][]stats.Point{t.LatencyCDF, t.FCT1KBCDF, t.QCTCDF} {
		for i := range cdf {
			cdf[i].Value *= inv
		}
	}
	for i := range t.Throughput {
		ts := &t.Throughput[i]
		for j := range ts.Seconds {
			ts.Seconds[j] *= inv
			ts.Mbps[j] *= s
		}
	}
}
