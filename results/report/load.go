package report

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fabric-emu/fabric/hosts/transport"
	"github.com/fabric-emu/fabric/results/capture"
	"github.com/fabric-emu/fabric/results/flows"
	"github.com/fabric-emu/fabric/results/lmm"
	"github.com/fabric-emu/fabric/results/stats"
)

// Meta is what report reads from a trial's meta.json. The runner writes
// more (resolved config, versions, seed); unknown fields are ignored.
type Meta struct {
	Scheme     string       `json:"scheme"`
	SchemeName string       `json:"scheme_name,omitempty"`
	Pattern    string       `json:"pattern,omitempty"`
	Paper      string       `json:"paper,omitempty"`
	Sweep      []SweepValue `json:"sweep,omitempty"`
	// PointSpec.Index orders the rows as the experiment file does.
	PointSpec struct {
		Index int `json:"index"`
	} `json:"point_spec"`
	Load  float64 `json:"load"`
	Point string  `json:"point"`
	Trial int     `json:"trial"`
	// BottleneckBPS and UnloadedRTTNS define the ideal FCT for slowdowns
	// (see package flows for how the RTT is measured).
	BottleneckBPS float64 `json:"bottleneck_bps"`
	UnloadedRTTNS int64   `json:"unloaded_rtt_ns"`
	// PathLinks is how many links on the bottleneck's path serialise a
	// lone packet (flows.Ideal.Links), for the ideal's store-and-forward.
	PathLinks int `json:"path_links,omitempty"`
	// QueryResponses is how many responses an incast query has (0: no
	// incast), so that a query missing one is not counted as complete.
	QueryResponses int `json:"query_responses,omitempty"`
	// ScaleFactor is s of the scaling rule: the paper's rate over the
	// bottleneck's; the paper's times are the measured ones divided by it
	// (0: the experiment states no paper rate).
	ScaleFactor float64 `json:"scale_factor,omitempty"`
	// Fidelity carries the runner's CPU and rate figures.
	Fidelity *Fidelity `json:"fidelity,omitempty"`
	// Classes are the experiment's traffic classes and their SLOs, in
	// the file's order (none without classes).
	Classes []ClassMeta `json:"classes,omitempty"`
	// CPU is where the CPU went during the traffic (none in runs from
	// before it was sampled).
	CPU *CPUAccount `json:"cpu_account,omitempty"`
	// ScheduleStartNS is the schedule's time 0 on CLOCK_REALTIME, the
	// clock of the records and of CPU.StartNS.
	ScheduleStartNS int64 `json:"schedule_start_ns,omitempty"`
	// PaperUnits says the experiment was written at the paper's rates
	// and times and ran at ScaleFactor: the report divides the trial's
	// times by it and multiplies its rates.
	PaperUnits bool `json:"paper_units,omitempty"`
	// Predicted is the run's plan for the trial (none without a machine
	// profile).
	Predicted *Predicted `json:"predicted,omitempty"`
	// Machine is the machine the trial ran on (none in runs from before
	// it was recorded).
	Machine *Machine `json:"machine,omitempty"`
}

// MetaFile is the name of a trial's metadata file.
const MetaFile = "meta.json"

// LoadTrial reads one trial directory into a TrialSummary.
func LoadTrial(dir string) (*TrialSummary, error) {
	metaPath := filepath.Join(dir, MetaFile)
	b, err := os.ReadFile(metaPath)
	if err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	var meta Meta
	if err := json.Unmarshal(b, &meta); err != nil {
		return nil, fmt.Errorf("report: %s: %s", metaPath, jsonErrorPosition(b, err))
	}
	t := &TrialSummary{Scheme: meta.Scheme, SchemeName: meta.SchemeName, Pattern: meta.Pattern, Paper: meta.Paper, Sweep: meta.Sweep,
		PointIndex: meta.PointSpec.Index, Load: meta.Load, Point: meta.Point, Trial: meta.Trial, Dir: dir, ScaleFactor: meta.ScaleFactor, CPU: meta.CPU,
		ScheduleStartNS: meta.ScheduleStartNS, PaperUnits: meta.PaperUnits, Predicted: meta.Predicted, Machine: meta.Machine}
	if meta.Fidelity != nil {
		t.Fidelity = *meta.Fidelity
	}
	// The layout names the point and trial; meta.json need not repeat them.
	if t.Point == "" {
		t.Point = filepath.Base(filepath.Dir(dir))
	}
	if t.Trial == 0 {
		if n, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(dir), "trial-")); err == nil {
			t.Trial = n
		}
	}
	if t.Scheme == "" {
		t.Scheme = t.Point
	}
	if err := t.loadLMM(filepath.Join(dir, "lmm")); err != nil {
		return nil, err
	}
	if err := t.loadFlows(dir, meta); err != nil {
		return nil, err
	}
	if err := t.loadCaptureStats(dir); err != nil {
		return nil, err
	}
	if meta.PaperUnits {
		t.toPaperUnits(meta.ScaleFactor)
	}
	return t, nil
}

// jsonErrorPosition turns a JSON syntax or type error into "line L: ...".
func jsonErrorPosition(data []byte, err error) string {
	var off int64 = -1
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		off = se.Offset
	case errors.As(err, &te):
		off = te.Offset
		return fmt.Sprintf("line %d: field %q: %v", 1+strings.Count(string(data[:min(int(off), len(data))]), "\n"), te.Field, err)
	}
	if off < 0 {
		return err.Error()
	}
	return fmt.Sprintf("line %d: %v", 1+strings.Count(string(data[:min(int(off), len(data))]), "\n"), err)
}

// loadLMM reads the first (by name) LMM measurement of the trial. A trial
// measures one switch port; more files are reported in the notes.
func (t *TrialSummary) loadLMM(dir string) error {
	sums, _ := filepath.Glob(filepath.Join(dir, "*.summary.json"))
	slices.Sort(sums)
	if len(sums) > 0 {
		s, err := lmm.ReadSummary(sums[0])
		if err != nil {
			return fmt.Errorf("report: %w", err)
		}
		us := s.US
		c := s.Counts
		t.SwitchLatencyUS, t.LMM = &us, &c
		if p := s.Probe; p != nil && p.Matched > 0 {
			pu := p.US
			t.ProbeLatencyUS, t.ProbesLost = &pu, p.Lost
		}
		t.Fidelity.LMMUnmatched = c.Unmatched
		if len(sums) > 1 {
			t.Fidelity.Notes = append(t.Fidelity.Notes, fmt.Sprintf("%d LMM measurements; table uses %s", len(sums), filepath.Base(sums[0])))
		}
		cdf := strings.TrimSuffix(sums[0], ".summary.json") + ".cdf.csv"
		if pts, err := ReadCDF(cdf); err == nil {
			t.LatencyCDF = pts
		} else if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("report: %w", err)
		}
		return nil
	}
	// No summary (the runner matched but did not summarise): recompute from
	// the per-packet CSV.
	csvs, _ := filepath.Glob(filepath.Join(dir, "*.packets.csv"))
	slices.Sort(csvs)
	if len(csvs) == 0 {
		return nil
	}
	lat, err := readLatencyColumn(csvs[0])
	if err != nil {
		return err
	}
	s := stats.Summarize(lat)
	t.SwitchLatencyUS = &s
	t.LatencyCDF = stats.CDF(lat, 2000)
	return nil
}

// readLatencyColumn reads every packet's latency from a per-packet CSV,
// in µs.
func readLatencyColumn(path string) ([]float64, error) {
	times, err := lmm.ReadTimes(path)
	if err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	lat := make([]float64, len(times))
	for i, t := range times {
		lat[i] = float64(t.Latency()) / 1e3
	}
	return lat, nil
}

// ReadCDF reads a "<value>,fraction" CSV written by stats.WriteCDF.
func ReadCDF(path string) ([]stats.Point, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	var pts []stats.Point
	for line := 2; sc.Scan(); line++ {
		v, fr, ok := strings.Cut(sc.Text(), ",")
		x, err1 := strconv.ParseFloat(v, 64)
		y, err2 := strconv.ParseFloat(fr, 64)
		if !ok || err1 != nil || err2 != nil {
			return nil, fmt.Errorf("%s:%d: want <value>,<fraction>", path, line)
		}
		pts = append(pts, stats.Point{Value: x, Fraction: y})
	}
	return pts, sc.Err()
}

func (t *TrialSummary) loadFlows(dir string, meta Meta) error {
	set, err := transport.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	t.Metrics = metricValues(set.Metrics)
	if len(set.Flows)+len(set.Queries)+len(set.Samples) == 0 {
		return nil
	}
	if meta.BottleneckBPS <= 0 {
		return fmt.Errorf("report: %s: field bottleneck_bps must be set (> 0) to compute slowdowns of %d flows",
			filepath.Join(dir, MetaFile), len(set.Flows))
	}
	if err := t.addFlows(set, meta); err != nil {
		return fmt.Errorf("report: %s: %w", dir, err)
	}
	return nil
}

// SummarizeFlows is the flow half of a trial's summary (slowdowns, per
// class and SLO) from records held in memory rather than a trial
// directory: what a model's predicted completion times look like through
// the same one slowdown computation as a trial's (the capacity search's
// first guess, experiments.Search).
func SummarizeFlows(set *transport.Set, meta Meta) (*TrialSummary, error) {
	if meta.BottleneckBPS <= 0 {
		return nil, fmt.Errorf("report: bottleneck rate %v bit/s must be positive", meta.BottleneckBPS)
	}
	t := &TrialSummary{Scheme: meta.Scheme, SchemeName: meta.SchemeName, Pattern: meta.Pattern}
	return t, t.addFlows(set, meta)
}

// addFlows computes the summary's flow statistics from set.
func (t *TrialSummary) addFlows(set *transport.Set, meta Meta) error {
	a, err := flows.Analyze(set, flows.Ideal{BottleneckBPS: meta.BottleneckBPS, RTT: time.Duration(meta.UnloadedRTTNS), Links: meta.PathLinks}, meta.QueryResponses)
	if err != nil {
		return err
	}
	t.Fidelity.IncompleteFlows = a.Incomplete
	if spans := t.Fidelity.CPUSaturatedSpans; len(spans) > 0 {
		t.Fidelity.CPUTail = a.TailExposures(spans)
		t.Fidelity.CPUTailDistorted = slices.ContainsFunc(t.Fidelity.CPUTail, flows.TailExposure.Distorted)
	}
	if b := a.Bucket("1KB"); b.N > 0 {
		s := b.FCTUS
		t.FCT1KBUS = &s
		t.FCT1KBCDF = stats.CDF(b.FCTs(), 2000)
	}
	if b := a.Bucket("10MB"); b.N > 0 {
		s := b.FCTUS
		t.FCT10MBUS = &s
	}
	if a.All.N > 0 {
		s := a.All.Slowdown
		t.SlowdownAll = &s
	}
	if a.ShortHalf.N > 0 {
		s := a.ShortHalf.Slowdown
		t.ShortHalf = &s
	}
	t.Spectrum = a.Spectrum
	t.Classes = classResults(a, meta.Classes)
	for _, b := range a.Sizes {
		if b.N > 0 {
			t.SizeSlowdown = append(t.SizeSlowdown, b)
		}
	}
	if q := a.Queries; q != nil {
		s := q.QCTUS
		t.QCTUS = &s
		t.QCTCDF = stats.CDF(q.QCTs(), 2000)
	}
	if tp := a.Throughput; tp != nil {
		s := tp.MbpsDist
		t.ThroughputMbp = &s
		t.Utilization, t.Jain, t.PerFlowMbps = tp.Utilization, tp.Jain, tp.PerFlowMbps()
		for _, ser := range tp.Series {
			t.Throughput = append(t.Throughput, TimeSeries{Label: ser.Label, Seconds: ser.Seconds, Mbps: ser.Mbps})
		}
	}
	return nil
}

// loadCaptureStats sums ring drops over every capture statistics file in
// the trial directory tree: they, not the runner's copy of the sum, are
// the trial's capture drops whenever they are there.
func (t *TrialSummary) loadCaptureStats(dir string) error {
	seen := map[string]bool{}
	var drops uint64
	found := false
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() || seen[path] {
			return err
		}
		seen[path] = true
		all, err := capture.ReadStats(path)
		if err != nil {
			return fmt.Errorf("report: %w", err)
		}
		for _, s := range all {
			found = true
			drops += s.Drops
			if s.Drops > 0 {
				t.Fidelity.Notes = append(t.Fidelity.Notes, fmt.Sprintf("capture %s dropped %d of %d packets", s.Label, s.Drops, s.KernelPackets))
			}
		}
		return nil
	})
	if found {
		t.Fidelity.CaptureDrops = drops
	}
	return err
}

// SetAsideDir is where a run keeps the trial runs the fidelity monitor
// flagged and the runner ran again (the experiment's reruns): kept to be
// looked at, never counted, so FindTrials does not look inside it.
const SetAsideDir = "set-aside"

// FindTrials returns every directory under the given run directories that
// holds a meta.json, sorted, except under a SetAsideDir below a run
// directory. A directory given directly may be a trial.
func FindTrials(runDirs ...string) ([]string, error) {
	var trials []string
	for _, root := range runDirs {
		if _, err := os.Stat(root); err != nil {
			return nil, fmt.Errorf("report: %w", err)
		}
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && d.Name() == SetAsideDir && path != root {
				return filepath.SkipDir
			}
			if !d.IsDir() && d.Name() == MetaFile {
				trials = append(trials, filepath.Dir(path))
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("report: %w", err)
		}
	}
	slices.Sort(trials)
	return slices.Compact(trials), nil
}

// LoadRuns loads every trial under the run directories.
func LoadRuns(runDirs ...string) ([]*TrialSummary, error) {
	dirs, err := FindTrials(runDirs...)
	if err != nil {
		return nil, err
	}
	if len(dirs) == 0 {
		return nil, fmt.Errorf("report: no trial (directory with %s) under %s", MetaFile, strings.Join(runDirs, ", "))
	}
	var out []*TrialSummary
	for _, d := range dirs {
		t, err := LoadTrial(d)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// Generate is `fabric report RUNDIR...`: it loads every trial under the run
// directories and writes report.md, summary.csv and the figures into the
// first of them.
func Generate(runDirs ...string) (*Report, error) {
	if len(runDirs) == 0 {
		return nil, errors.New("report: no run directory given")
	}
	trials, failed, err := LoadRun(runDirs...)
	if err != nil {
		return nil, err
	}
	return WriteRun(runDirs[0], failed, trials...)
}
