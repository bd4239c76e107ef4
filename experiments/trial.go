package experiments

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"fabric/emu"
	"fabric/hosts"
	"fabric/hosts/cc"
	"fabric/hosts/endpoint"
	"fabric/hosts/workload"
	"fabric/internal/units"
	"fabric/results/capture"
	"fabric/results/lmm"
	"fabric/results/report"
	"fabric/tc"
	"fabric/tc/pacer"
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

// proc is an endpoint process of the trial.
type proc struct {
	name string
	p    hosts.Process
	log  string
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

	// HULL's pacer on every host that sends data (§4.2).
	var pacers []*pacer.Pacer
	defer func() {
		for _, pc := range pacers {
			pc.Stop()
		}
	}()
	if scheme.Pacer.On(false) {
		for _, h := range plan.dataSenders {
			nic := lab.Graph.Node(h).Ifaces[0]
			pc, err := pacer.Start(ctx, emu.NetNSPath(lab.Name, h), nic.Name, pacer.Config{LineRate: nic.Link.Rate})
			if err != nil {
				return nil, fmt.Errorf("pacer on %s: %w", h, err)
			}
			pacers = append(pacers, pc)
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
	for _, pc := range pacers {
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
		name := l.Switch + "_" + l.To
		if _, err := lmm.Measure(filepath.Join(dir, "lmm"), name, ingress, egress, cfg); err != nil {
			return nil, err
		}
		if !r.opts.KeepPcaps {
			for _, f := range append(append([]string{}, ingress...), egress) {
				os.Remove(f)
			}
		}
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

// trialPlan is who runs what in one trial.
type trialPlan struct {
	servers, clients []endpoint.Config
	dataSenders      []string // hosts whose NIC gets the pacer
	bottleneckBPS    float64
	rttFrom, rttTo   string
	ports            []watchedPort
}

// watchedPort is a switch port whose achieved rate the monitor reports.
type watchedPort struct {
	label    string
	target   tc.Target
	rate     units.Rate
	expected float64
}

// plan turns the traffic section and point into endpoint configurations.
func (r *runner) plan(lab *emu.Lab, p Point, scheme Scheme, seed uint64, dir string, cdf *workload.CDF) (*trialPlan, error) {
	spec := r.spec
	t := spec.Traffic
	addr := func(h string) endpoint.Peer { return endpoint.Peer{Name: h, Addr: lab.Graph.Node(h).Addr} }
	peers := func(hs []string) []endpoint.Peer {
		var out []endpoint.Peer
		for _, h := range hs {
			out = append(out, addr(h))
		}
		return out
	}
	ecn := endpoint.ECNOff
	if scheme.ECN.On(needsECN(scheme.CC)) {
		ecn = endpoint.ECNOn
	}
	base := func(pattern endpoint.Pattern, host string) endpoint.Config {
		return endpoint.Config{
			Pattern: pattern, Host: host, RunDir: dir, Seed: hostSeed(seed, host),
			CC: scheme.CC, ECN: ecn, DSCP: endpoint.DSCPPolicy{Classes: scheme.DSCP},
		}
	}
	// Request/response clients wait this long for responses in flight.
	drain := min(max(spec.Duration/3, 2*time.Second), 10*time.Second)
	pl := &trialPlan{}
	serverSet := map[string]bool{}
	addServer := func(h string) {
		if !serverSet[h] {
			serverSet[h] = true
			pl.servers = append(pl.servers, base(endpoint.Server, h))
		}
	}
	var receiver string // the host whose link is the bottleneck
	clients, servers := spec.clients(), spec.servers()
	switch t.Pattern {
	case "dynamic":
		for _, h := range servers {
			addServer(h)
		}
		for _, c := range clients {
			cfg := base(endpoint.Dynamic, c)
			cfg.Peers, cfg.Duration, cfg.Drain = peers(without(servers, c)), spec.Duration, drain
			cfg.Workload, cfg.Load, cfg.ConnsPerServer = cdf, p.Load, t.Conns
			cfg.LinkRate = hostRate(lab, c)
			pl.clients = append(pl.clients, cfg)
		}
		pl.dataSenders, receiver = servers, clients[0]
	case "incast":
		workers := servers
		if p.Senders > 0 {
			workers = servers[:p.Senders]
		}
		for _, h := range workers {
			addServer(h)
		}
		cfg := base(endpoint.Incast, clients[0])
		cfg.Peers, cfg.Duration, cfg.Drain = peers(workers), spec.Duration, drain
		cfg.Size, cfg.Rounds, cfg.Gap = p.Size, t.Rounds, t.Gap
		pl.clients = append(pl.clients, cfg)
		pl.dataSenders, receiver = workers, clients[0]
	case "static":
		senders := clients
		if p.Senders > 0 {
			senders = clients[:p.Senders]
		}
		for _, h := range servers {
			addServer(h)
		}
		for _, c := range senders {
			cfg := base(endpoint.Static, c)
			cfg.Peers, cfg.Duration, cfg.Flows = peers(without(servers, c)), spec.Duration, p.Flows
			pl.clients = append(pl.clients, cfg)
		}
		pl.dataSenders, receiver = senders, servers[0]
	case "permutation":
		all := hostNamesOf(lab)
		perm := endpoint.Derangement(len(all), seed)
		for _, h := range all {
			addServer(h)
		}
		for i, h := range all {
			cfg := base(endpoint.Permutation, h)
			cfg.Peers, cfg.Duration, cfg.Flows = []endpoint.Peer{addr(all[perm[i]])}, spec.Duration, p.Flows
			pl.clients = append(pl.clients, cfg)
		}
		pl.dataSenders, receiver = all, all[perm[0]]
	}
	if pr := spec.Measure.Probe; pr != nil {
		addServer(pr.To)
		cfg := base(endpoint.Probe, pr.From)
		cfg.Peers, cfg.Duration = []endpoint.Peer{addr(pr.To)}, spec.Duration
		pl.clients = append(pl.clients, cfg)
	}
	// The bottleneck is the switch port facing the receiver, at the rate
	// the scheme gives it.
	rx := lab.Graph.Node(receiver).Ifaces[0].Peer
	rate, err := portRate(lab.Spec, rx)
	if err != nil {
		return nil, err
	}
	pl.bottleneckBPS = float64(rate)
	other := ""
	for _, s := range pl.dataSenders {
		if s != receiver {
			other = s
			break
		}
	}
	pl.rttFrom, pl.rttTo = receiver, other
	expected := float64(rate)
	if t.Pattern == "dynamic" {
		expected *= p.Load
	} else if t.Pattern == "incast" {
		expected = 0 // bursts: no steady rate to expect
	}
	watch := func(i *emu.Iface, exp float64) error {
		target, err := lab.PortTarget(i.Node.Name, i.Name)
		if err != nil {
			return err
		}
		rt, err := portRate(lab.Spec, i)
		if err != nil {
			return err
		}
		pl.ports = append(pl.ports, watchedPort{label: i.Label(), target: target, rate: rt, expected: exp})
		return nil
	}
	if err := watch(rx, expected); err != nil {
		return nil, err
	}
	if l := spec.Measure.LMM; l != nil {
		if i := lab.Graph.Node(l.Switch).Iface(l.To); i != nil && i != rx {
			if err := watch(i, 0); err != nil {
				return nil, err
			}
		}
	}
	return pl, nil
}

// containerRunDir prepares the records directory for container hosts
// inside the lab's run directory, with a copy of the workload file there
// (a container sees no other host path).
func containerRunDir(lab *emu.Lab, cdf *workload.CDF) (string, *workload.CDF, error) {
	d := filepath.Join(emu.LabDir(lab.Name), "records")
	if err := os.MkdirAll(d, 0o755); err != nil {
		return "", nil, err
	}
	if cdf == nil {
		return d, nil, nil
	}
	b, err := os.ReadFile(cdf.File)
	if err != nil {
		return "", nil, err
	}
	inside := filepath.Join(d, filepath.Base(cdf.File))
	if err := os.WriteFile(inside, b, 0o644); err != nil {
		return "", nil, err
	}
	c := *cdf
	c.File = inside
	return d, &c, nil
}

// moveRecords copies the endpoints' record files from src to dst.
func moveRecords(src, dst string) error {
	files, err := filepath.Glob(filepath.Join(src, "records-*.jsonl"))
	if err != nil {
		return err
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dst, filepath.Base(f)), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// portRate is the resolved rate of a switch (or host) egress port.
func portRate(spec *emu.Spec, i *emu.Iface) (units.Rate, error) {
	ps, _ := spec.PortSpec(i)
	port, err := ps.Resolve(i.Link.Rate, i.Link.MTU)
	if err != nil {
		return 0, err
	}
	return port.Rate, nil
}

func hostRate(lab *emu.Lab, h string) units.Rate { return lab.Graph.Node(h).Ifaces[0].Link.Rate }

func hostNamesOf(lab *emu.Lab) []string {
	var out []string
	for _, h := range lab.Graph.Hosts() {
		out = append(out, h.Name)
	}
	return out
}

func without(list []string, h string) []string {
	var out []string
	for _, x := range list {
		if x != h {
			out = append(out, x)
		}
	}
	return out
}

// hostSeed gives every host its own stream from the trial's seed.
func hostSeed(seed uint64, host string) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%s", seed, host)
	if v := h.Sum64(); v != 0 {
		return v
	}
	return 1
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

// awaitLog waits until the process's log holds line, or it exits.
func awaitLog(ctx context.Context, pr *proc, line string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	exited := make(chan error, 1)
	go func() { exited <- pr.p.Wait() }()
	for {
		if b, _ := os.ReadFile(pr.log); bytes.Contains(b, []byte(line)) {
			return nil
		}
		select {
		case err := <-exited:
			return fmt.Errorf("%s exited before it was ready: %v (%s)", pr.name, err, lastLine(pr.log))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %v (%s)", pr.name, timeout, lastLine(pr.log))
		}
	}
}

// waitProc waits for a client to finish by itself; when ctx ends first it
// stops the client and returns ctx's error.
func waitProc(ctx context.Context, pr *proc) error {
	done := make(chan error, 1)
	go func() { done <- pr.p.Wait() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		stopProc(pr, 5*time.Second)
		return ctx.Err()
	}
}

// waitTimeout waits for an exit already asked for, killing after d.
func waitTimeout(pr *proc, d time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- pr.p.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		pr.p.Signal(syscall.SIGKILL)
		<-done
		return fmt.Errorf("did not stop within %v; killed", d)
	}
}

// stopProc asks a process to stop (SIGTERM flushes its records) and kills
// it if it does not. A process that already exited is left alone.
func stopProc(pr *proc, d time.Duration) {
	if err := pr.p.Signal(syscall.SIGTERM); errors.Is(err, os.ErrProcessDone) {
		pr.p.Wait()
		return
	}
	waitTimeout(pr, d)
}

// lastLine is the last non-empty line of a log, for error messages.
func lastLine(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "no log"
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) == 0 || lines[len(lines)-1] == "" {
		return "empty log"
	}
	return lines[len(lines)-1]
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
