package experiments

import (
	"path/filepath"

	"github.com/fabric-emu/fabric/results/lmm"
	"github.com/fabric-emu/fabric/results/plot"
	"github.com/fabric-emu/fabric/results/report"
)

// trialPlots draws a trial's own figures next to its data: the switch
// latency CDF of its LMM measurement, the CPU idle time series the
// fidelity verdict rests on and where the CPU went. (The run's report
// overlays the schemes.)
func trialPlots(dir string, lmmName string, label string, samples []cpuSample, cpu *report.CPUAccount) error {
	if lmmName != "" {
		pts, err := report.ReadCDF(lmm.FilesFor(filepath.Join(dir, "lmm"), lmmName).CDF)
		if err == nil && len(pts) > 0 {
			fig := plot.Figure{Title: "Switch latency, " + label, XLabel: "switch latency (µs)",
				LogX: plot.WantsLogX(max(pts[0].Value, 1e-3), pts[len(pts)-1].Value)}
			if err := plot.CDF(filepath.Join(dir, "switch-latency-cdf"), fig, []plot.Curve{{Label: label, Points: pts}}); err != nil {
				return err
			}
		}
	}
	if len(samples) > 1 {
		s := plot.Series{Label: "CPU idle"}
		floor := plot.Series{Label: "unfaithful below"}
		for _, c := range samples {
			s.X = append(s.X, c.At.Seconds())
			s.Y = append(s.Y, c.IdlePct)
		}
		floor.X = []float64{s.X[0], s.X[len(s.X)-1]}
		floor.Y = []float64{cpuIdleFloor, cpuIdleFloor}
		fig := plot.Figure{Title: "CPU idle during the traffic, " + label, XLabel: "time (s)", YLabel: "CPU idle (%)"}
		if err := plot.Lines(filepath.Join(dir, "cpu-idle"), fig, []plot.Series{s, floor}, false); err != nil {
			return err
		}
	}
	if cpu != nil {
		if _, err := report.DrawCPU(filepath.Join(dir, "cpu-account"), "Where the CPU went, "+label, cpu); err != nil {
			return err
		}
	}
	return nil
}
