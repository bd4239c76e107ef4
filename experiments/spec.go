// Package experiments runs reproducible transport experiments on emulated
// labs: an experiment file names a lab, a set of schemes (port and host
// settings), a traffic pattern, a sweep and what to measure; Run expands the
// sweep into points, runs every point's trials on a fresh lab and writes
//
//	runs/NAME/TIMESTAMP/POINT/trial-N/   meta.json, records, lmm/, captures
//	runs/NAME/TIMESTAMP/summary.csv, report.md, figures
//
// The built-in paper scenarios (HULL, incast, permutation) live under
// scenarios/ and are embedded in the binary; see Builtin.
package experiments

import (
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/fabric-emu/fabric/emu"
	"github.com/fabric-emu/fabric/hosts/probe"
	"github.com/fabric-emu/fabric/hosts/transport"
	"github.com/fabric-emu/fabric/hosts/workload"
	"github.com/fabric-emu/fabric/internal/units"
	"github.com/fabric-emu/fabric/internal/yamlfile"
	"github.com/fabric-emu/fabric/tc"
)

// Spec is an experiment file (docs/experiments.md):
//
//	name: hull-dynamic
//	lab: ../examples/star-10.yaml          # or an inline lab
//	schemes:
//	  tcp-droptail: {cc: cubic, ports: {buffer: 700KB}}
//	  dctcp-30k:    {cc: dctcp, ports: {marking: {ecn: {threshold: 30KB}}}}
//	traffic: {pattern: dynamic, workload: hull_1k_10m, client: h5, servers: rest, conns: 16}
//	sweep: {scheme: all, load: [0.2, 0.4, 0.6]}
//	duration: 30s
//	trials: 3
//	measure: {lmm: {switch: s0, from: [eth1], to: eth5}, probe: {from: h1, to: h5}}
type Spec struct {
	Name     string            `yaml:"name" json:"name"`
	Lab      yaml.Node         `yaml:"lab" json:"-"`
	Schemes  map[string]Scheme `yaml:"schemes" json:"schemes"`
	Traffic  Traffic           `yaml:"traffic" json:"traffic"`
	Sweep    Sweep             `yaml:"sweep,omitempty" json:"sweep"`
	Duration time.Duration     `yaml:"duration" json:"duration"`
	Trials   int               `yaml:"trials,omitempty" json:"trials"`
	// Reruns is how many times a trial that the fidelity monitor flags
	// (a saturated CPU, late delay lines, a port short of its rate) is
	// set aside and run again with its own seed, so with the same
	// messages, before it counts as it stands. The flagged runs are kept
	// under the run's set-aside/ and counted in the report, never in a
	// result. 0, the default, keeps every trial's first run; --resume
	// keeps every complete trial as it is.
	Reruns  int     `yaml:"reruns,omitempty" json:"reruns,omitempty"`
	Seed    uint64  `yaml:"seed,omitempty" json:"seed,omitempty"`
	Measure Measure `yaml:"measure,omitempty" json:"measure"`
	// Paper names the published table the report compares with
	// (hull-table1, hull-table4, hull-table5); see package paper.
	Paper string `yaml:"paper,omitempty" json:"paper,omitempty"`
	// Scale is the scaling rule's factor s (docs/design.md, Scale): auto
	// or a number, the file being written at the paper's rates and times,
	// or the paper's rate, the file being written at the emulation's.
	Scale *Scale `yaml:"scale,omitempty" json:"scale,omitempty"`
	// Search, when set, makes `fabric run` search each scheme's least
	// link rate that meets every class's SLO instead of running the
	// sweep (SearchSpec).
	Search *SearchSpec `yaml:"search,omitempty" json:"search,omitempty"`
	// Quick is the short variant used by `fabric run --quick` and CI.
	Quick *Variant `yaml:"quick,omitempty" json:"quick,omitempty"`

	// Resolved by Parse.
	File string `yaml:"-" json:"file,omitempty"`
	// Dir is the experiment file's directory, absolute: a relative path
	// in the file (lab:, a transport's command) is its neighbour, and
	// transports run in it. "" for a built-in scenario.
	Dir         string    `yaml:"-" json:"dir,omitempty"`
	LabSpec     *emu.Spec `yaml:"-" json:"lab"`
	SchemeOrder []string  `yaml:"-" json:"scheme_order"` // as written in the file
	ClassOrder  []string  `yaml:"-" json:"class_order,omitempty"`
	IsQuick     bool      `yaml:"-" json:"quick_variant"`

	graph *emu.Graph
	cdfs  map[string]*workload.CDF // every workload the spec names, opened
	// drain replaces the pattern's drain time (drainTime) when set: the
	// calibration's short trials need none of it.
	drain time.Duration
	// applied is the factor the spec was scaled by (scaledBy): 0 for a
	// spec as written.
	applied float64
	// minScale is the least s at which a file written at the paper's
	// scale builds (its pacer intervals and route timers reach the
	// emulation's least), 1 otherwise.
	minScale float64
	doc      *yamlfile.Doc
}

// Variant overrides the run length and the sweep of a Spec.
type Variant struct {
	Duration time.Duration `yaml:"duration,omitempty" json:"duration,omitempty"`
	Trials   int           `yaml:"trials,omitempty" json:"trials,omitempty"`
	// Reruns is the quick variant's own: it does not inherit the full
	// variant's, because a rerun costs a short CI check more than it
	// saves.
	Reruns int         `yaml:"reruns,omitempty" json:"reruns,omitempty"`
	Sweep  *Sweep      `yaml:"sweep,omitempty" json:"sweep,omitempty"`
	Search *SearchSpec `yaml:"search,omitempty" json:"search,omitempty"`
	// Scale pins the quick variant's s (a number) in a file written at
	// the paper's scale, so that CI runs one known scale.
	Scale *Scale `yaml:"scale,omitempty" json:"scale,omitempty"`
	// Seed is the quick variant's base seed when --seed gives none: a
	// short trial's draw can miss what the scenario shows (its load far
	// from the nominal), so the file may name a draw it has checked.
	Seed uint64 `yaml:"seed,omitempty" json:"seed,omitempty"`
}

// Scheme is a named bundle of a transport and switch-port and host
// settings.
type Scheme struct {
	// Transport carries the traffic (tcp when unset): see TransportSpec.
	Transport TransportSpec `yaml:"transport,omitempty" json:"transport"`
	// Args are free-form settings for the transport, passed to it as the
	// JSON object FABRIC_ARGS.
	Args map[string]any `yaml:"args,omitempty" json:"args,omitempty"`
	// ReadyTimeout is how long the transports get, from their launch, to
	// print their ready line: the start instant is that far away. Unset,
	// netns hosts get a first try of readyFirstTry and, if one misses it,
	// a second launch with readyAllowanceNetNS; docker hosts get
	// readyAllowanceDocker.
	ReadyTimeout Duration `yaml:"ready_timeout,omitempty" json:"ready_timeout,omitempty"`
	// StopGrace is how long the transports get after SIGTERM to flush
	// their records and exit before they are killed and the trial fails
	// (default defaultStopGrace, the contract's 10 s).
	StopGrace Duration `yaml:"stop_grace,omitempty" json:"stop_grace,omitempty"`
	// CC is the senders' TCP congestion control: cubic, reno, bbr or dctcp
	// (the kernel's, or fabric's BPF DCTCP where the kernel has none). The
	// tcp transport needs it; for the others it sets the hosts' default.
	CC string `yaml:"cc,omitempty" json:"cc,omitempty"`
	// ECN is on or off; unset means on for dctcp and off otherwise.
	ECN OnOff `yaml:"ecn,omitempty" json:"ecn,omitempty"`
	// Pacer puts HULL's pacer (tc/pacer) on every data sender's NIC,
	// with the parameters of the lab file's hosts.pacer (and overrides).
	Pacer OnOff `yaml:"pacer,omitempty" json:"pacer,omitempty"`
	// Ports is merged over the lab's ports section.
	Ports tc.SwitchPorts `yaml:"ports,omitempty" json:"ports"`
	// Links changes the lab's link delay and loss (emu.Impairments).
	Links emu.Impairments `yaml:"links,omitempty" json:"links,omitempty"`
	// DSCP gives small flows a code point, e.g. [{below: 10KB, value: CS7}]
	// puts them in band 0 of a port with `queues: {bands: 2}` (HULL Table 5).
	DSCP []transport.SizeClass `yaml:"dscp,omitempty" json:"dscp,omitempty"`
}

// OnOff is on/off (also true/false, yes/no); "" is unset.
type OnOff string

// UnmarshalYAML accepts on, off, true, false, yes, no.
func (s *OnOff) UnmarshalYAML(n *yaml.Node) error {
	switch strings.ToLower(n.Value) {
	case "on", "true", "yes":
		*s = "on"
	case "off", "false", "no":
		*s = "off"
	default:
		return yamlfile.LineError(n, "want on or off, got %q", n.Value)
	}
	return nil
}

// On reports whether the switch is on; unset is def.
func (s OnOff) On(def bool) bool {
	if s == "" {
		return def
	}
	return s == "on"
}

// Traffic is what the hosts send. Hosts are named as in the lab; a host
// list is a name, a list of names, "all" or "rest" (every host not named
// elsewhere in the traffic section).
type Traffic struct {
	Pattern string   `yaml:"pattern" json:"pattern"` // dynamic, incast, static, permutation, priority, poisson
	Client  HostList `yaml:"client,omitempty" json:"client,omitempty"`
	Servers HostList `yaml:"servers,omitempty" json:"servers,omitempty"`

	Workload string  `yaml:"workload,omitempty" json:"workload,omitempty"` // dynamic
	Load     float64 `yaml:"load,omitempty" json:"load,omitempty"`         // dynamic, fraction of the client's link; poisson, of its port
	Conns    int     `yaml:"conns,omitempty" json:"conns,omitempty"`       // dynamic, per server

	Size    units.Size    `yaml:"size,omitempty" json:"size,omitempty"`       // incast response size S; priority: the short message; poisson: each packet's payload
	Senders int           `yaml:"senders,omitempty" json:"senders,omitempty"` // incast workers N, static sending hosts, priority long flows
	Rounds  int           `yaml:"rounds,omitempty" json:"rounds,omitempty"`   // incast queries, priority rounds (0: for the duration)
	Gap     time.Duration `yaml:"gap,omitempty" json:"gap,omitempty"`         // incast, priority: pause between rounds
	// LongSize is the priority pattern's long messages (each long flow's
	// bytes per round).
	LongSize units.Size `yaml:"long_size,omitempty" json:"long_size,omitempty"`
	// Interval is the time between incast query starts (open loop);
	// unset, it is the gap plus twice the aggregator's ideal query time.
	Interval time.Duration `yaml:"interval,omitempty" json:"interval,omitempty"`
	// Arrival is the dynamic pattern's inter-arrival law (Poisson unless
	// lognormal_sigma is set).
	Arrival Arrival `yaml:"arrival,omitempty" json:"arrival,omitempty"`
	// Classes are the dynamic pattern's traffic classes (ClassSpec), in
	// place of Workload and Arrival; Spec.ClassOrder has their file order.
	Classes map[string]ClassSpec `yaml:"classes,omitempty" json:"classes,omitempty"`

	Flows int `yaml:"flows,omitempty" json:"flows,omitempty"` // static, permutation: flows per peer
}

// Sweep lists the values each swept field takes; the points are the cross
// product. A field not swept keeps the traffic section's value.
type Sweep struct {
	Scheme  SchemeList   `yaml:"scheme,omitempty" json:"scheme,omitempty"` // "all" or names
	Load    []float64    `yaml:"load,omitempty" json:"load,omitempty"`
	Senders []int        `yaml:"senders,omitempty" json:"senders,omitempty"`
	Flows   []int        `yaml:"flows,omitempty" json:"flows,omitempty"`
	Size    []units.Size `yaml:"size,omitempty" json:"size,omitempty"`
	// Delay gives every link this one-way delay in each direction.
	Delay []Duration `yaml:"delay,omitempty" json:"delay,omitempty"`
	// Workload varies the dynamic pattern's flow-size distribution.
	Workload []string `yaml:"workload,omitempty" json:"workload,omitempty"`
}

// Duration is a time.Duration written with its unit ("1ms").
type Duration time.Duration

// UnmarshalYAML accepts a duration with its unit.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if err != nil || v < 0 {
		return yamlfile.LineError(n, "want a non-negative duration with its unit, such as 1ms, got %q", n.Value)
	}
	*d = Duration(v)
	return nil
}

// SchemeList is "all" or a list of scheme names.
type SchemeList []string

// UnmarshalYAML accepts "all", one name, or a list.
func (s *SchemeList) UnmarshalYAML(n *yaml.Node) error {
	return (*HostList)(s).UnmarshalYAML(n)
}

// Measure says what to capture.
type Measure struct {
	LMM   *LMMSpec   `yaml:"lmm,omitempty" json:"lmm,omitempty"`
	Probe *ProbeSpec `yaml:"probe,omitempty" json:"probe,omitempty"`
	// Warmup is how long after the clients start the LMM's captures
	// begin: long-lived flows start in slow start, which fills any
	// buffer; HULL's tables report the steady state.
	Warmup time.Duration `yaml:"warmup,omitempty" json:"warmup,omitempty"`
	// Queue samples the bottleneck port's queue over the same span
	// (QueueSpec).
	Queue *QueueSpec `yaml:"queue,omitempty" json:"queue,omitempty"`
}

// LMMSpec is HULL's Latency Measurement Module (§5.2): captures at the
// switch's ingress ports From and its egress port To.
type LMMSpec struct {
	Switch string   `yaml:"switch" json:"switch"`
	From   []string `yaml:"from" json:"from"`
	To     string   `yaml:"to" json:"to"`
	// Probes matches only the probe stream instead of every packet.
	Probes bool `yaml:"probes,omitempty" json:"probes,omitempty"`
}

// name names the LMM's output files (lmm/NAME.*); "" without an LMM.
func (l *LMMSpec) name() string {
	if l == nil {
		return ""
	}
	return l.Switch + "_" + l.To
}

// ProbeSpec sends HULL's probe stream: a 1500-byte packet every Interval
// (1 ms, HULL §5.2, unless set), at the paper's scale like every time.
type ProbeSpec struct {
	From     string        `yaml:"from" json:"from"`
	To       string        `yaml:"to" json:"to"`
	Interval time.Duration `yaml:"interval,omitempty" json:"interval,omitempty"`
}

// every is the time between two probes.
func (p *ProbeSpec) every() time.Duration { return cmpOrDuration(p.Interval, probe.DefaultInterval) }

// Known congestion controls (hosts/cc provides dctcp where the kernel has none).
