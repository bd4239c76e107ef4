package experiments

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/fabric-emu/fabric/emu"
	"github.com/fabric-emu/fabric/experiments/cost"
	"github.com/fabric-emu/fabric/hosts/cc"
	"github.com/fabric-emu/fabric/hosts/probe"
	"github.com/fabric-emu/fabric/internal/cpustat"
	"github.com/fabric-emu/fabric/internal/snmp"
	"github.com/fabric-emu/fabric/results/capture"
	"github.com/fabric-emu/fabric/results/lmm"
	"github.com/fabric-emu/fabric/results/report"
	"github.com/fabric-emu/fabric/tc"
	"github.com/fabric-emu/fabric/tc/delay"
)

// runner holds what every trial of one run shares.
type runner struct {
	spec *Spec
	opts Options
	run  *RunFile
	dir  string
	// machine is the idle machine's timing (delay.MeasureMachine) when
	// the run's labs have delay lines.
	machine *delay.MachineTiming
	// predicted is the run's plan for the point the runner is at (nil
	// without a machine profile); profile is the machine profile the run
	// plans with, learned what it has learned of users' transports.
	predicted    *report.Predicted
	profile      *cost.Profile
	learned      map[string]cost.Transport
	recalibrated map[string]bool // traffic groups after whose trial the machine was measured again
}

// trialMeta is meta.json: report.Meta (what the report reads) plus the
// resolved configuration and provenance.
type trialMeta struct {
	report.Meta
	Experiment string    `json:"experiment"`
	File       string    `json:"file,omitempty"` // the experiment file (Spec.Path)
	Seed       uint64    `json:"seed"`
	BaseSeed   uint64    `json:"base_seed"`
	PointSpec  Point     `json:"point_spec"`
	Lab        string    `json:"lab"`
	LabSpec    *emu.Spec `json:"lab_spec"` // the lab as built: the scheme's ports merged in
	SchemeSpec Scheme    `json:"scheme_spec"`
	Traffic    Traffic   `json:"traffic"`
	Duration   string    `json:"duration"`
	// Drain is the drain the pattern allows after the schedule, Drained
	// how much of it the trial waited: less once every message was
	// recorded whole (recordWatch).
	Drain     string          `json:"drain"`
	Drained   string          `json:"drained"`
	Endpoints [][]string      `json:"endpoints"` // every endpoint's command line
	Fabric    Version         `json:"fabric"`
	Kernel    string          `json:"kernel"`
	Doctor    json.RawMessage `json:"doctor,omitempty"`
	Started   time.Time       `json:"started"`
	Finished  time.Time       `json:"finished"`
	RTTNote   string          `json:"rtt_note,omitempty"`
}

// trial is one trial of one point, run in phases: set up (lab, schedule,
// RTTs, pacers, transports), traffic, then collect (records, fidelity, LMM,
// plots, meta).
// Everything a phase creates registers its undo on the trial's cleanup
// stack, which runs once, in reverse, however the trial ends.
type trial struct {
	*runner
	point  Point
	n      int
	dir    string
	scheme Scheme
	seed   uint64

	lab     *emu.Lab
	plan    *trialPlan
	drained time.Duration // how long the trial waited after the schedule's end
	epDir   string        // where transports read schedules and write records (the lab's run directory for container hosts)
	// rtt is the unloaded RTT between the receiver and a sender (the ideal
	// FCT's); contractRTT the one between the lab's farthest hosts (what
	// transports are told).
	rtt, contractRTT time.Duration
	rttNote          string
	started          time.Time
	startNS          int64 // the schedule's time 0

	allowance  time.Duration // how long the transports had for their ready lines
	transports []*proc
	probeSink  *proc   // the LMM probe's receiver, when measure.probe asks for one
	probe      *proc   // and its sender
	procs      []*proc // every process started, stopped together when the trial ends
	argvs      [][]string
	unrecorded int // scheduled messages with no flow record
	captures   []*capture.Session
	ingress    []string // capture files of the LMM's ingress ports
	egress     string
	queue      *queueSampler // measure.queue's, while it runs

	cleanup []func() error
}

// trial runs one trial of point p into dir and returns its fidelity
// record and its summary as the report reads it. Everything it creates
// (lab, pacers, captures, processes, the DCTCP registration) is removed
// before it returns, whether it succeeds, fails or ctx ends.
func (r *runner) trial(ctx context.Context, p Point, n int, dir string) (fid *report.Fidelity, sum *report.TrialSummary, err error) {
	t := &trial{runner: r, point: p, n: n, dir: dir, scheme: r.spec.schemeAt(p),
		seed: TrialSeed(r.run.Seed, p.Traffic, n), started: time.Now().UTC()}
	defer func() { err = errors.Join(err, t.undo()) }()
	if err := t.setUp(ctx); err != nil {
		return nil, nil, err
	}
	traffic, err := t.runTraffic(ctx)
	if err != nil {
		return nil, nil, err
	}
	return t.collect(ctx, traffic)
}

// onCleanup registers fn to run when the trial ends.
func (t *trial) onCleanup(fn func() error) { t.cleanup = append(t.cleanup, fn) }

// undo runs the cleanup stack in reverse, once.
func (t *trial) undo() error {
	var errs []error
	for i := len(t.cleanup) - 1; i >= 0; i-- {
		errs = append(errs, t.cleanup[i]())
	}
	t.cleanup = nil
	return errors.Join(errs...)
}

// setUp makes the trial's directories, lab and plan, measures the lab's
// RTTs, starts the pacers and gets every transport ready.
func (t *trial) setUp(ctx context.Context) error {
	for _, d := range []string{t.dir, filepath.Join(t.dir, "logs"), filepath.Join(t.dir, "lmm"), filepath.Join(t.dir, "captures")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	// A congestion control the kernel lacks (dctcp here) is registered as
	// BPF struct_ops for the trial and released after it.
	if cc.NeedsECN(t.scheme.CC) {
		release, _, err := cc.Ensure(ctx, t.scheme.CC)
		if err != nil {
			return fmt.Errorf("congestion control %s: %w", t.scheme.CC, err)
		}
		t.onCleanup(release)
	}
	if err := t.upLab(ctx); err != nil {
		return err
	}
	var err error
	if t.plan, err = t.runner.plan(t.lab, t.point, t.seed); err != nil {
		return err
	}
	t.measureRTTs(ctx)
	// HULL's pacer on every host that sends data (§4.2), with the lab
	// file's pacer parameters; lab.Down stops them.
	if t.scheme.Pacer.On(false) {
		if err := t.lab.StartPacers(ctx, t.plan.dataSenders); err != nil {
			return err
		}
	}
	if t.epDir, err = t.transportDir(); err != nil {
		return err
	}
	if err := t.startProbeSink(ctx); err != nil {
		return err
	}
	return t.startTransports(ctx)
}

// measureRTTs measures, in the idle lab, the RTT the ideal FCT uses
// (receiver to a sender) and the one transports are told (the farthest
// hosts').
func (t *trial) measureRTTs(ctx context.Context) {
	var err error
	if t.plan.rttTo != "" {
		if t.rtt, err = unloadedRTT(ctx, t.lab, t.plan.rttFrom, t.plan.rttTo); err != nil {
			t.rttNote = err.Error()
		}
	}
	t.contractRTT = t.rtt
	if t.plan.farTo != "" {
		if rtt, err := unloadedRTT(ctx, t.lab, t.plan.farFrom, t.plan.farTo); err == nil {
			t.contractRTT = rtt
		}
	}
}

// upLab builds the trial's own lab, the scheme's settings merged in.
func (t *trial) upLab(ctx context.Context) error {
	name := fmt.Sprintf("%s%d-%d", t.opts.LabPrefix, os.Getpid()%100000, labSeq.Add(1))
	if len(name) > 24 {
		name = name[len(name)-24:]
	}
	lab, err := emu.Up(ctx, t.spec.labFor(t.scheme, t.point, name))
	if err != nil {
		return err
	}
	t.lab = lab
	t.onCleanup(func() error {
		if err := lab.Down(context.WithoutCancel(ctx)); err != nil {
			return fmt.Errorf("lab %s down: %w", name, err)
		}
		return nil
	})
	return nil
}

// transportDir is where transports read their schedules and write their
// records: the trial directory, or for container hosts the lab's run
// directory, the only host path mounted in the containers (emu.Host.Ref);
// collectRecords copies them out.
func (t *trial) transportDir() (string, error) {
	if !t.containers() {
		return t.dir, nil
	}
	d := filepath.Join(emu.LabDir(t.lab.Name), "transport")
	return d, os.MkdirAll(d, 0o755)
}

// startCaptures starts the LMM's captures: every ingress port it names
// and its egress port, on the switch.
func (t *trial) startCaptures(ctx context.Context) error {
	l := t.spec.Measure.LMM
	if l == nil {
		return nil
	}
	ns, err := t.lab.NetNS(l.Switch)
	if err != nil {
		return err
	}
	// The LMM matches packets that enter at From and leave at To: an
	// ingress capture keeps what is addressed to a host behind To, the
	// egress capture what comes from a host behind From, so the rest of
	// the switch's traffic costs the captures nothing.
	var from []netip.Addr
	for _, ifn := range l.From {
		from = append(from, hostAddrs(t.lab.Graph.HostsVia(l.Switch, ifn))...)
	}
	to := hostAddrs(t.lab.Graph.HostsVia(l.Switch, l.To))
	at := func(ifname string, dir capture.Direction, tag string) (*capture.Session, error) {
		f := capture.Filter{IPv4Only: true, Direction: dir}
		switch {
		case dir == capture.In && len(to) <= capture.MaxAddrs:
			f.Dst = to
		case dir == capture.Out && len(from) <= capture.MaxAddrs:
			f.Src = from
		}
		o := capture.Options{Filter: f}
		pt := capture.Point{NetNS: ns, Ifname: ifname, Label: l.Switch + ":" + ifname + ":" + tag}
		s, err := capture.Start(ctx, pt, filepath.Join(t.dir, "captures"), o)
		if err == nil {
			t.captures = append(t.captures, s)
		}
		return s, err
	}
	t.onCleanup(func() error { _, err := t.stopCaptures(); return err })
	for _, ifn := range l.From {
		s, err := at(ifn, capture.In, "in")
		if err != nil {
			return err
		}
		t.ingress = append(t.ingress, s.File())
	}
	s, err := at(l.To, capture.Out, "out")
	if err != nil {
		return err
	}
	t.egress = s.File()
	return nil
}

// hostAddrs are the hosts' addresses.
func hostAddrs(hosts []*emu.Node) []netip.Addr {
	out := make([]netip.Addr, 0, len(hosts))
	for _, h := range hosts {
		out = append(out, h.Addr)
	}
	return out
}

// stopCaptures stops the captures still running and sums their drops.
func (t *trial) stopCaptures() (drops uint64, err error) {
	all, err := capture.StopAll(t.captures)
	for _, st := range all {
		drops += st.Drops
	}
	t.captures = nil
	return drops, err
}

// trafficResult is what the traffic phase observed.
type trafficResult struct {
	samples       []cpuSample
	stealPct      float64            // the hypervisor's share of the CPU over the traffic
	cpu           *report.CPUAccount // where the CPU went, on the samples' clock
	elapsed       time.Duration      // from the schedule's start: the ports' rates are over it
	before, after map[string]*tc.PortStats
	delay         *report.DelayFidelity // nil without delay lines
	backlogDrops  uint64                // the kernel's input backlogs' drops during the traffic
	ndp           *report.NDPFidelity   // nil without NDP ports
}

// runTraffic runs the schedule: captures from its start (or after the
// warm-up), the transports until the schedule and its drain are over, then
// SIGTERM, and the records checked against the schedule.
func (t *trial) runTraffic(ctx context.Context) (*trafficResult, error) {
	res := &trafficResult{before: t.portCounters(ctx)}
	trimming := ndpTargets(t.lab)
	ndpBefore := readNDP(ctx, trimming)
	wire := t.lab.DelayLoop()
	var wireBefore delay.Stats
	var use0 delay.Use
	var stat0 cpustat.Stat
	if wire != nil {
		wireBefore, _ = wire.Stats()
		use0, _ = wire.Use()
		stat0, _ = cpustat.ReadStat()
	}
	backlog0, backlogErr := snmp.BacklogDrops()
	var probes []*proc
	if t.probeSink != nil {
		probes = append(probes, t.probeSink)
	}
	cpu := startCPUMonitor(ctx, t.transports, probes)
	defer cpu.Stop()
	if err := t.driveSchedule(ctx, cpu); err != nil {
		return nil, err
	}
	res.samples, res.stealPct = cpu.Stop()
	res.cpu = cpu.Account()
	res.elapsed = time.Since(time.Unix(0, t.startNS))
	res.after = t.portCounters(context.WithoutCancel(ctx))
	res.ndp = ndpFidelity(ndpBefore, readNDP(context.WithoutCancel(ctx), trimming))
	if backlog1, err := snmp.BacklogDrops(); err == nil && backlogErr == nil && backlog1 > backlog0 {
		res.backlogDrops = backlog1 - backlog0
	}
	if wire != nil {
		after, err := wire.Stats()
		if err != nil {
			return nil, fmt.Errorf("delay lines: %w", err)
		}
		use1, _ := wire.Use()
		stat1, _ := cpustat.ReadStat()
		res.delay = delayFidelity(t.lab.Graph.Lines(), wireBefore, after, use1.Since(use0), t.runner.machine, loopCPUSteal(stat0, stat1))
		if err := wire.Err(); err != nil {
			return nil, fmt.Errorf("delay lines: %w", err)
		}
	}
	if err := t.stopTransports(); err != nil {
		return nil, err
	}
	if err := t.collectRecords(); err != nil {
		return nil, err
	}
	return res, ctx.Err()
}

// driveSchedule waits for the start, starts the probe and, after the
// warm-up, the captures and the queue sampler, and waits out the schedule
// and its drain.
func (t *trial) driveSchedule(ctx context.Context, cpu *cpuMonitor) error {
	if err := t.sleepUntil(ctx, time.Unix(0, t.startNS)); err != nil {
		return err
	}
	if err := t.startProbe(ctx); err != nil {
		return err
	}
	if t.probe != nil {
		cpu.watch(t.probe, true)
	}
	if err := t.sleepUntil(ctx, time.Unix(0, t.startNS).Add(t.spec.Measure.Warmup)); err != nil {
		return err
	}
	if err := t.startCaptures(ctx); err != nil {
		return err
	}
	if err := t.startQueueSampler(ctx); err != nil {
		return err
	}
	if err := t.runSchedule(ctx); err != nil {
		return err
	}
	return t.stopQueueSampler()
}

// sleepUntil waits for at, or returns ctx's error. The captures start at
// the schedule's time 0 or, with a warm-up, that long after: long-lived
// flows start in slow start and fill any buffer, and HULL's tables report
// the steady state; the probe runs from time 0 for the schedule's duration.
func (t *trial) sleepUntil(ctx context.Context, at time.Time) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Until(at)):
		return nil
	}
}

// collect writes the trial's fidelity record, LMM measurement, plots and
// meta.json, and marks it complete once the report can read it back; it
// returns what the report read.
func (t *trial) collect(ctx context.Context, tr *trafficResult) (*report.Fidelity, *report.TrialSummary, error) {
	fid, err := t.fidelity(tr)
	if err != nil {
		return nil, nil, err
	}
	if err := t.measureLMM(); err != nil {
		return nil, nil, err
	}
	label := fmt.Sprintf("%s trial %d", t.point.Name, t.n)
	if err := trialPlots(t.dir, t.spec.Measure.LMM.name(), label, tr.samples, tr.cpu); err != nil {
		return nil, nil, fmt.Errorf("plots: %w", err)
	}
	if err := t.writeMeta(fid, tr.cpu); err != nil {
		return nil, nil, err
	}
	// The trial counts only if the report can read it back.
	sum, err := report.LoadTrial(t.dir)
	if err != nil {
		os.Remove(filepath.Join(t.dir, report.MetaFile))
		return nil, nil, err
	}
	// The report judges the tail against the saturated stretches (it has
	// the slowdowns); fidelity.json, written before for a trial that
	// fails later, and its advice follow it.
	if len(sum.Fidelity.CPUTail) > 0 {
		fid.CPUTail, fid.CPUTailDistorted = sum.Fidelity.CPUTail, sum.Fidelity.CPUTailDistorted
		fid.Advice = advice(fid, t.spec)
		if err := writeJSON(filepath.Join(t.dir, "fidelity.json"), fid); err != nil {
			return nil, nil, err
		}
	}
	return fid, sum, os.WriteFile(filepath.Join(t.dir, completeMarker), []byte(time.Now().UTC().Format(time.RFC3339)+"\n"), 0o644)
}

// fidelity judges whether the machine kept up (CPU, captures, pacers) and
// what each watched port achieved, and writes cpu.csv and fidelity.json.
func (t *trial) fidelity(tr *trafficResult) (fid *report.Fidelity, err error) {
	fid = &report.Fidelity{CPUSamples: len(tr.samples), CPUStealPct: tr.stealPct}
	fid.MinCPUIdlePct, fid.CPUBusyFrac, fid.CPUSaturated = cpuVerdict(tr.samples)
	fid.CPUSaturatedSpans = saturatedSpans(tr.samples)
	fid.CPUConsumers = cpuConsumers(tr.cpu, tr.samples)
	for _, pc := range t.lab.Pacers() {
		if e := pc.Err(); e != nil {
			fid.PacerErrors = append(fid.PacerErrors, e.Error())
		}
	}
	if fid.CaptureDrops, err = t.stopCaptures(); err != nil {
		return nil, fmt.Errorf("capture: %w", err)
	}
	for _, pt := range t.plan.ports {
		pr, ok := achievedRate(pt, tr.before[pt.label], tr.after[pt.label], tr.elapsed)
		if !ok {
			continue
		}
		fid.Ports = append(fid.Ports, pr)
		if pr.ExpectedBPS > 0 {
			if f := pr.AchievedBPS / pr.ExpectedBPS; f < 1 && (fid.RateAchievedFraction == 0 || f < fid.RateAchievedFraction) {
				fid.RateAchievedFraction = f
			}
		}
	}
	fid.DelayLines = tr.delay
	fid.NDP = tr.ndp
	fid.BacklogDrops = tr.backlogDrops
	fid.Advice = advice(fid, t.spec)
	if err := writeCPUCSV(filepath.Join(t.dir, "cpu.csv"), tr.samples); err != nil {
		return nil, err
	}
	return fid, writeJSON(filepath.Join(t.dir, "fidelity.json"), fid)
}

// achievedRate is a watched port's rate, drops and marks between two readings
// of its counters.
func achievedRate(pt watchedPort, b, a *tc.PortStats, elapsed time.Duration) (report.PortRate, bool) {
	if a == nil || b == nil {
		return report.PortRate{}, false
	}
	pr := report.PortRate{Port: pt.label, ConfiguredBPS: float64(pt.rate), ExpectedBPS: pt.expected,
		AchievedBPS: float64(a.Bytes-b.Bytes) * 8 / elapsed.Seconds(), Drops: a.Drops - b.Drops}
	for _, m := range [][2]*tc.MarkerStats{{b.ECN, a.ECN}, {b.Phantom, a.Phantom}} {
		if m[0] != nil && m[1] != nil {
			pr.ECT += m[1].ECT - m[0].ECT
			pr.Marks += m[1].Marks - m[0].Marks
		}
	}
	return pr, true
}

// measureLMM matches the captures into every packet's switch latency.
func (t *trial) measureLMM() error {
	l := t.spec.Measure.LMM
	if l == nil {
		return nil
	}
	cfg := lmm.Config{}
	if t.spec.Measure.Probe != nil {
		// Every packet, and the probe stream's on their own too.
		cfg.Probe.DstPort = probe.DefaultPort
	}
	if l.Probes {
		cfg.Mode = lmm.Probes
	}
	if _, err := lmm.Measure(filepath.Join(t.dir, "lmm"), l.name(), t.ingress, t.egress, cfg); err != nil {
		return err
	}
	if !t.opts.KeepPcaps {
		for _, f := range append(append([]string{}, t.ingress...), t.egress) {
			os.Remove(f)
		}
	}
	return nil
}

// writeMeta writes meta.json, what the report reads about the trial.
func (t *trial) writeMeta(fid *report.Fidelity, cpu *report.CPUAccount) error {
	rep := *fid
	if t.unrecorded > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("%d of %d scheduled messages have no flow record: not delivered, or not recorded, by SIGTERM", t.unrecorded, t.plan.schedule.Len()))
	}
	p, spec := t.point, t.spec
	meta := trialMeta{
		Meta: report.Meta{Scheme: p.Label(spec), SchemeName: p.Scheme, Pattern: spec.Traffic.Pattern, Paper: spec.Paper,
			Sweep: p.SweepValues(spec), Load: p.Load, Point: p.Name, Trial: t.n,
			BottleneckBPS: t.plan.bottleneckBPS, UnloadedRTTNS: t.rtt.Nanoseconds(), PathLinks: t.plan.pathLinks, QueryResponses: t.plan.queryResponses,
			ScaleFactor: t.spec.reportScale(t.plan.bottleneckBPS), Fidelity: &rep, Classes: spec.ClassMetas(p), CPU: cpu,
			ScheduleStartNS: t.startNS, PaperUnits: spec.Scale.PaperScale(), Predicted: t.predicted, Machine: thisMachine(t.profile)},
		Experiment: spec.Name, File: spec.Path(), Seed: t.seed, BaseSeed: t.run.Seed, PointSpec: p, Lab: t.lab.Name,
		LabSpec: t.lab.Spec, SchemeSpec: t.scheme, Traffic: spec.Traffic, Duration: spec.Duration.String(), Drain: t.drain().String(), Drained: t.drained.Round(time.Millisecond).String(), Endpoints: t.argvs,
		Fabric: t.run.Fabric, Kernel: t.run.Kernel, Started: t.started, Finished: time.Now().UTC(), RTTNote: t.rttNote,
	}
	if t.run.Doctor != nil {
		meta.Doctor, _ = json.Marshal(t.run.Doctor)
	}
	return writeJSON(filepath.Join(t.dir, report.MetaFile), meta)
}

// portCounters reads the tc counters of the watched ports (errors leave a
// port out: the rate check is informative, not essential).
func (t *trial) portCounters(ctx context.Context) map[string]*tc.PortStats {
	out := map[string]*tc.PortStats{}
	for _, p := range t.plan.ports {
		st, err := tc.Stats(ctx, p.target)
		if err != nil {
			t.opts.Log.Debug("port stats", "port", p.label, "err", err)
			continue
		}
		out[p.label] = &st
	}
	return out
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
