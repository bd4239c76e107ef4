package experiments

import (
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"time"

	"fabric/emu"
	"fabric/hosts/endpoint"
	"fabric/hosts/workload"
	"fabric/internal/units"
	"fabric/tc"
)

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
	ccFlag := scheme.CC
	if needsECN(scheme.CC) && lab.Spec.Hosts.Runtime != "" && lab.Spec.Hosts.Runtime != emu.DefaultRuntime {
		// A container cannot inspect the host's BPF registrations, which
		// the endpoint does to check a BPF congestion control; the hosts'
		// default is already this one (Spec.labFor), so sockets get it
		// without asking.
		ccFlag = ""
	}
	base := func(pattern endpoint.Pattern, host string) endpoint.Config {
		return endpoint.Config{
			Pattern: pattern, Host: host, RunDir: dir, Seed: hostSeed(seed, host),
			CC: ccFlag, ECN: ecn, DSCP: endpoint.DSCPPolicy{Classes: scheme.DSCP},
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
	port, err := spec.Port(i)
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
