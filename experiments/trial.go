package experiments

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"fabric/emu"
	"fabric/hosts"
	"fabric/hosts/cc"
	"fabric/hosts/endpoint"
	"fabric/results/capture"
	"fabric/results/lmm"
	"fabric/results/report"
	"fabric/tc"
)

// runner holds what every trial of one run shares.
type runner struct {
	spec *Spec
	opts Options
	run  *RunFile
	dir  string
}

// trialMeta is meta.json: report.Meta (what the report reads) plus the
// resolved configuration and provenance.
type trialMeta struct {
	report.Meta
	Experiment string          `json:"experiment"`
	SchemeName string          `json:"scheme_name"` // Meta.Scheme is the row label (scheme plus non-load sweep values)
	Seed       uint64          `json:"seed"`
	BaseSeed   uint64          `json:"base_seed"`
	PointSpec  Point           `json:"point_spec"`
	Lab        string          `json:"lab"`
	LabSpec    *emu.Spec       `json:"lab_spec"` // the lab as built: the scheme's ports merged in
	SchemeSpec Scheme          `json:"scheme_spec"`
	Traffic    Traffic         `json:"traffic"`
	Duration   string          `json:"duration"`
	Endpoints  [][]string      `json:"endpoints"` // every endpoint's command line
	Fabric     Version         `json:"fabric"`
	Kernel     string          `json:"kernel"`
	Doctor     json.RawMessage `json:"doctor,omitempty"`
	Started    time.Time       `json:"started"`
	Finished   time.Time       `json:"finished"`
	RTTNote    string          `json:"rtt_note,omitempty"`
}

// trial runs one trial of point p into dir. Everything it creates (lab,
// pacers, captures, processes, the DCTCP registration) is removed before it
// returns, whether it succeeds, fails or ctx ends.
func (r *runner) trial(ctx context.Context, p Point, n int, dir string) (fid *FidelityRecord, err error) {
	spec := r.spec
	scheme := spec.Schemes[p.Scheme]
	seed := TrialSeed(r.run.Seed, p.Traffic, n)
	for _, d := range []string{dir, filepath.Join(dir, "logs"), filepath.Join(dir, "lmm"), filepath.Join(dir, "captures")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	started := time.Now().UTC()
	// Cleanup must run even when ctx is already cancelled.
	bg := context.WithoutCancel(ctx)

	// A congestion control the kernel lacks (dctcp here) is registered as
	// BPF struct_ops for the trial and released after it.
	if needsECN(scheme.CC) {
		release, _, err := cc.Ensure(ctx, scheme.CC)
		if err != nil {
			return nil, fmt.Errorf("congestion control %s: %w", scheme.CC, err)
		}
		defer release()
	}

	labName := fmt.Sprintf("%s%d-%d", r.opts.LabPrefix, os.Getpid()%100000, labSeq.Add(1))
	if len(labName) > 24 {
		labName = labName[len(labName)-24:]
	}
	lab, err := emu.Up(ctx, spec.labFor(scheme, labName))
	if err != nil {
		return nil, err
	}
	defer func() {
		if derr := lab.Down(bg); derr != nil {
			err = errors.Join(err, fmt.Errorf("lab %s down: %w", labName, derr))
		}
	}()

	// Endpoints write their records into epDir: the trial directory, or
	// for container hosts the lab's run directory, the only host path
	// mounted in the containers (hosts.HostOf), copied out afterwards.
	epDir, cdf := dir, spec.cdf
	if lab.Spec.Hosts.Runtime != "" && lab.Spec.Hosts.Runtime != emu.DefaultRuntime {
		if epDir, cdf, err = containerRunDir(lab, spec.cdf); err != nil {
			return nil, err
		}
	}
	plan, err := r.plan(lab, p, scheme, seed, epDir, cdf)
	if err != nil {
		return nil, err
	}

	// The ideal FCT needs the unloaded RTT of the lab, measured now.
	var rtt time.Duration
	rttNote := ""
	if plan.rttFrom != "" {
		if rtt, err = unloadedRTT(lab, plan.rttFrom, plan.rttTo); err != nil {
			rttNote = err.Error()
		}
	}

	// HULL's pacer on every host that sends data (§4.2), with the lab
	// file's pacer parameters; lab.Down stops them.
	if scheme.Pacer.On(false) {
		if err := lab.StartPacers(ctx, plan.dataSenders); err != nil {
			return nil, err
		}
	}

	// The LMM's captures (started with the traffic, after the warm-up).
	var caps []*capture.Session
	var ingress []string
	var egress string
	stopCaps := func() (uint64, error) {
		var drops uint64
		var errs []error
		for _, c := range caps {
			st, err := c.Stop()
			drops += st.Drops
			errs = append(errs, err)
		}
		caps = nil
		return drops, errors.Join(errs...)
	}
	defer stopCaps()
	// Servers first; clients once every server listens.
	var servers, clients []*proc
	defer func() { // on any exit path, nothing of ours keeps running
		for _, pr := range append(append([]*proc{}, clients...), servers...) {
			stopProc(pr, 5*time.Second)
		}
	}()
	var argvs [][]string
	start := func(cfg endpoint.Config) (*proc, error) {
		ref, err := hosts.HostOf(lab, cfg.Host)
		if err != nil {
			return nil, err
		}
		args := append([]string{"endpoint"}, cfg.Args()...)
		argvs = append(argvs, args)
		logPath := filepath.Join(dir, "logs", cfg.Host+"."+string(cfg.Pattern)+".log")
		pr, err := hosts.StartFabric(ctx, ref, args, logPath)
		if err != nil {
			return nil, err
		}
		return &proc{name: cfg.Host + "/" + string(cfg.Pattern), p: pr, log: logPath}, nil
	}
	for _, cfg := range plan.servers {
		pr, err := start(cfg)
		if err != nil {
			return nil, err
		}
		servers = append(servers, pr)
	}
	for _, pr := range servers {
		if err := awaitLog(ctx, pr, "server listening", 10*time.Second); err != nil {
			return nil, err
		}
	}

	startCaptures := func() error {
		if l := spec.Measure.LMM; l != nil {
			ns := emu.NetNSPath(lab.Name, l.Switch)
			capDir := filepath.Join(dir, "captures")
			opts := capture.Options{Filter: capture.Filter{IPv4Only: true}}
			for _, ifn := range l.From {
				o := opts
				o.Filter.Direction = capture.In
				s, err := capture.Start(ctx, capture.Point{NetNS: ns, Ifname: ifn, Label: l.Switch + ":" + ifn + ":in"}, capDir, o)
				if err != nil {
					return err
				}
				caps = append(caps, s)
				ingress = append(ingress, s.File())
			}
			o := opts
			o.Filter.Direction = capture.Out
			s, err := capture.Start(ctx, capture.Point{NetNS: ns, Ifname: l.To, Label: l.Switch + ":" + l.To + ":out"}, capDir, o)
			if err != nil {
				return err
			}
			caps = append(caps, s)
			egress = s.File()
		}
		return nil
	}

	// Traffic phase, watched by the fidelity monitor.
	before := r.portCounters(ctx, lab, plan.ports)
	cpu := startCPUMonitor(ctx)
	t0 := time.Now()
	if spec.Measure.Warmup == 0 {
		if err := startCaptures(); err != nil {
			cpu.Stop()
			return nil, err
		}
	}
	for _, cfg := range plan.clients {
		pr, err := start(cfg)
		if err != nil {
			cpu.Stop()
			return nil, err
		}
		clients = append(clients, pr)
	}
	// Long-lived flows start in slow start and fill any buffer; the paper
	// reports the steady state, so the LMM may skip a warm-up.
	if w := spec.Measure.Warmup; w > 0 {
		select {
		case <-ctx.Done():
			cpu.Stop()
			return nil, ctx.Err()
		case <-time.After(w):
		}
		if err := startCaptures(); err != nil {
			cpu.Stop()
			return nil, err
		}
	}
	var endpointErrs []string
	for _, pr := range clients {
		if err := waitProc(ctx, pr); err != nil {
			if ctx.Err() != nil {
				cpu.Stop()
				return nil, ctx.Err()
			}
			endpointErrs = append(endpointErrs, fmt.Sprintf("%s: %v (%s)", pr.name, err, lastLine(pr.log)))
		}
	}
	samples := cpu.Stop()
	elapsed := time.Since(t0)
	after := r.portCounters(bg, lab, plan.ports)
	clients = nil
	for _, pr := range servers {
		pr.p.Signal(syscall.SIGTERM)
	}
	for _, pr := range servers {
		if err := waitTimeout(pr, 10*time.Second); err != nil {
			endpointErrs = append(endpointErrs, fmt.Sprintf("%s: %v (%s)", pr.name, err, lastLine(pr.log)))
		}
	}
	servers = nil
	if epDir != dir {
		if err := moveRecords(epDir, dir); err != nil {
			return nil, err
		}
	}
	if len(endpointErrs) > 0 && ctx.Err() == nil {
		return nil, fmt.Errorf("endpoints failed: %s", strings.Join(endpointErrs, "; "))
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}

	fid = &FidelityRecord{CPUSamples: len(samples)}
	fid.CPUMinIdlePct, fid.CPUBusyFrac, fid.CPUSaturated = cpuVerdict(samples)
	for _, pc := range lab.Pacers() {
		if e := pc.Err(); e != nil {
			fid.PacerErrors = append(fid.PacerErrors, e.Error())
		}
	}
	drops, err := stopCaps()
	if err != nil {
		return nil, fmt.Errorf("capture: %w", err)
	}
	fid.CaptureDrops = drops
	shortfall := 0.0
	for _, pt := range plan.ports {
		b, a := before[pt.label], after[pt.label]
		if a == nil || b == nil {
			continue
		}
		pr := PortRate{Port: pt.label, ConfiguredBPS: float64(pt.rate), ExpectedBPS: pt.expected,
			AchievedBPS: float64(a.Bytes-b.Bytes) * 8 / elapsed.Seconds(), Drops: a.Drops - b.Drops}
		for _, m := range [][2]*tc.MarkerStats{{b.ECN, a.ECN}, {b.Phantom, a.Phantom}} {
			if m[0] != nil && m[1] != nil {
				pr.ECT += m[1].ECT - m[0].ECT
				pr.Marks += m[1].Marks - m[0].Marks
			}
		}
		fid.Ports = append(fid.Ports, pr)
		if pr.ExpectedBPS > 0 {
			if f := pr.AchievedBPS / pr.ExpectedBPS; f < 1 && (shortfall == 0 || f < shortfall) {
				shortfall = f
			}
		}
	}
	fid.Unfaithful = fid.CPUSaturated || fid.CaptureDrops > 0
	fid.Advice = fid.advice(spec)
	fid.EndpointErrors = endpointErrs
	if err := writeCPUCSV(filepath.Join(dir, "cpu.csv"), samples); err != nil {
		return nil, err
	}
	if err := writeJSON(filepath.Join(dir, "fidelity.json"), fid); err != nil {
		return nil, err
	}

	// The LMM: every packet's switch latency from the two sides' captures.
	if l := spec.Measure.LMM; l != nil {
		cfg := lmm.Config{}
		if l.Probes {
			cfg.Mode = lmm.Probes
		}
		name := l.name()
		if _, err := lmm.Measure(filepath.Join(dir, "lmm"), name, ingress, egress, cfg); err != nil {
			return nil, err
		}
		if !r.opts.KeepPcaps {
			for _, f := range append(append([]string{}, ingress...), egress) {
				os.Remove(f)
			}
		}
	}

	if err := trialPlots(dir, spec.Measure.LMM.name(), fmt.Sprintf("%s trial %d", p.Name, n), samples); err != nil {
		return nil, fmt.Errorf("plots: %w", err)
	}
	rep := &report.Fidelity{CPUSaturated: fid.CPUSaturated, MinCPUIdlePct: fid.CPUMinIdlePct, RateShortfall: shortfall}
	if fid.Advice != "" {
		rep.Notes = append(rep.Notes, fid.Advice)
	}
	for _, e := range fid.PacerErrors {
		rep.Notes = append(rep.Notes, "pacer: "+e)
	}
	meta := trialMeta{
		Meta: report.Meta{Scheme: p.Label(spec), Load: p.Load, Point: p.Name, Trial: n,
			BottleneckBPS: plan.bottleneckBPS, UnloadedRTTNS: rtt.Nanoseconds(), Fidelity: rep},
		Experiment: spec.Name, SchemeName: p.Scheme, Seed: seed, BaseSeed: r.run.Seed, PointSpec: p, Lab: lab.Name, LabSpec: lab.Spec,
		SchemeSpec: scheme, Traffic: spec.Traffic, Duration: spec.Duration.String(), Endpoints: argvs,
		Fabric: r.run.Fabric, Kernel: r.run.Kernel, Started: started, Finished: time.Now().UTC(), RTTNote: rttNote,
	}
	if r.run.Doctor != nil {
		meta.Doctor, _ = json.Marshal(r.run.Doctor)
	}
	if err := writeJSON(filepath.Join(dir, report.MetaFile), meta); err != nil {
		return nil, err
	}
	// The trial counts only if the report can read it back.
	if _, err := report.LoadTrial(dir); err != nil {
		os.Remove(filepath.Join(dir, report.MetaFile))
		return nil, err
	}
	return fid, os.WriteFile(filepath.Join(dir, completeMarker), []byte(time.Now().UTC().Format(time.RFC3339)+"\n"), 0o644)
}

// portCounters reads the tc counters of the watched ports (errors leave a
// port out: the rate check is informative, not essential).
func (r *runner) portCounters(ctx context.Context, lab *emu.Lab, ports []watchedPort) map[string]*tc.PortStats {
	out := map[string]*tc.PortStats{}
	for _, p := range ports {
		st, err := tc.Stats(ctx, p.target)
		if err != nil {
			r.opts.Log.Debug("port stats", "port", p.label, "err", err)
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
