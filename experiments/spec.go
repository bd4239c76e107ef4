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
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"fabric/emu"
	"fabric/experiments/paper"
	"fabric/hosts/endpoint"
	"fabric/hosts/workload"
	"fabric/internal/units"
	"fabric/internal/yamlfile"
	"fabric/tc"
)

// Spec is an experiment file (README "Experiments"):
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
	Seed     uint64            `yaml:"seed,omitempty" json:"seed,omitempty"`
	Measure  Measure           `yaml:"measure,omitempty" json:"measure"`
	// Paper names the published table the report compares with
	// (hull-table1, hull-table4, hull-table5); see package paper.
	Paper string `yaml:"paper,omitempty" json:"paper,omitempty"`
	// Quick is the short variant used by `fabric run --quick` and CI.
	Quick *Variant `yaml:"quick,omitempty" json:"quick,omitempty"`

	// Resolved by Parse.
	File        string    `yaml:"-" json:"file,omitempty"`
	LabSpec     *emu.Spec `yaml:"-" json:"lab"`
	SchemeOrder []string  `yaml:"-" json:"scheme_order"` // as written in the file
	IsQuick     bool      `yaml:"-" json:"quick_variant"`

	graph *emu.Graph
	cdf   *workload.CDF
}

// Variant overrides the run length and the sweep of a Spec.
type Variant struct {
	Duration time.Duration `yaml:"duration,omitempty" json:"duration,omitempty"`
	Trials   int           `yaml:"trials,omitempty" json:"trials,omitempty"`
	Sweep    *Sweep        `yaml:"sweep,omitempty" json:"sweep,omitempty"`
}

// Scheme is a named bundle of switch-port and host settings.
type Scheme struct {
	// CC is the senders' congestion control: cubic, reno, bbr or dctcp
	// (the kernel's, or fabric's BPF DCTCP where the kernel has none).
	CC string `yaml:"cc" json:"cc"`
	// ECN is on or off; unset means on for dctcp and off otherwise.
	ECN Switch `yaml:"ecn,omitempty" json:"ecn,omitempty"`
	// Pacer puts HULL's pacer (tc/pacer) on every data sender's NIC,
	// with the parameters of the lab file's hosts.pacer (and overrides).
	Pacer Switch `yaml:"pacer,omitempty" json:"pacer,omitempty"`
	// Ports is merged over the lab's ports section.
	Ports tc.PortsSpec `yaml:"ports,omitempty" json:"ports"`
	// DSCP gives small flows a code point, e.g. [{below: 10KB, value: CS7}]
	// puts them in band 0 of a port with `queues: {bands: 2}` (HULL Table 5).
	DSCP []endpoint.SizeClass `yaml:"dscp,omitempty" json:"dscp,omitempty"`
}

// Switch is on/off (also true/false, yes/no); "" is unset.
type Switch string

// UnmarshalYAML accepts on, off, true, false, yes, no.
func (s *Switch) UnmarshalYAML(n *yaml.Node) error {
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
func (s Switch) On(def bool) bool {
	if s == "" {
		return def
	}
	return s == "on"
}

// Traffic is what the hosts send. Hosts are named as in the lab; a host
// list is a name, a list of names, "all" or "rest" (every host not named
// elsewhere in the traffic section).
type Traffic struct {
	Pattern string   `yaml:"pattern" json:"pattern"` // dynamic, incast, static, permutation
	Client  HostList `yaml:"client,omitempty" json:"client,omitempty"`
	Servers HostList `yaml:"servers,omitempty" json:"servers,omitempty"`

	Workload string  `yaml:"workload,omitempty" json:"workload,omitempty"` // dynamic
	Load     float64 `yaml:"load,omitempty" json:"load,omitempty"`         // dynamic, fraction of the client's link
	Conns    int     `yaml:"conns,omitempty" json:"conns,omitempty"`       // dynamic, per server

	Size    units.Size    `yaml:"size,omitempty" json:"size,omitempty"`       // incast response size S
	Senders int           `yaml:"senders,omitempty" json:"senders,omitempty"` // incast workers N, static sending hosts
	Rounds  int           `yaml:"rounds,omitempty" json:"rounds,omitempty"`   // incast queries (0: for the duration)
	Gap     time.Duration `yaml:"gap,omitempty" json:"gap,omitempty"`         // incast pause between queries

	Flows int `yaml:"flows,omitempty" json:"flows,omitempty"` // static, permutation: flows per peer
}

// HostList is one host name or a list of them.
type HostList []string

// UnmarshalYAML accepts a scalar or a sequence of scalars.
func (h *HostList) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		*h = HostList{n.Value}
		return nil
	case yaml.SequenceNode:
		var out []string
		if err := n.Decode(&out); err != nil {
			return yamlfile.LineError(n, "want a host name or a list of host names")
		}
		*h = out
		return nil
	}
	return yamlfile.LineError(n, "want a host name or a list of host names")
}

// Sweep lists the values each swept field takes; the points are the cross
// product. A field not swept keeps the traffic section's value.
type Sweep struct {
	Scheme  SchemeList   `yaml:"scheme,omitempty" json:"scheme,omitempty"` // "all" or names
	Load    []float64    `yaml:"load,omitempty" json:"load,omitempty"`
	Senders []int        `yaml:"senders,omitempty" json:"senders,omitempty"`
	Flows   []int        `yaml:"flows,omitempty" json:"flows,omitempty"`
	Size    []units.Size `yaml:"size,omitempty" json:"size,omitempty"`
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

// ProbeSpec sends HULL's probe stream: a 1500-byte packet every 1 ms.
type ProbeSpec struct {
	From string `yaml:"from" json:"from"`
	To   string `yaml:"to" json:"to"`
}

// Patterns the traffic section accepts.
var trafficPatterns = []string{"dynamic", "incast", "static", "permutation"}

// Known congestion controls (hosts/cc provides dctcp where the kernel has none).
var knownCC = []string{"cubic", "reno", "bbr", "dctcp", "fabric_dctcp"}

// Load reads and validates an experiment file.
func Load(file string) (*Spec, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, &yamlfile.Error{File: file, Msg: err.Error()}
	}
	return Parse(file, data, "")
}

// Parse validates an experiment held in data. labDir is where a `lab:`
// path is resolved ("" means relative to file's directory on disk).
// Everything that could fail for bad input fails here, with file:line.
func Parse(file string, data []byte, labDir string) (*Spec, error) {
	var s Spec
	doc, err := yamlfile.Decode(file, data, &s)
	if err != nil {
		return nil, err
	}
	s.File = file
	if err := s.resolveLab(doc, labDir); err != nil {
		return nil, err
	}
	s.SchemeOrder = mappingKeys(doc.Root, "schemes")
	if err := s.validate(); err != nil {
		return nil, doc.Wrap(err)
	}
	return &s, nil
}

// resolveLab loads `lab:`: a path (relative to the experiment file) or an
// inline lab, whose errors are placed at their line in this file.
func (s *Spec) resolveLab(doc *yamlfile.Doc, labDir string) error {
	n := &s.Lab
	switch n.Kind {
	case 0:
		return doc.Errorf("lab", "is required: a lab file path or an inline lab (name, topology, ...)")
	case yaml.ScalarNode:
		p := n.Value
		if !filepath.IsAbs(p) {
			if labDir == "" {
				labDir = filepath.Dir(s.File)
			}
			p = filepath.Join(labDir, p)
		}
		spec, err := emu.Load(p)
		if err != nil {
			var ye *yamlfile.Error
			if errors.As(err, &ye) && ye.Line == 0 {
				return doc.Errorf("lab", "%v", err)
			}
			return err
		}
		s.LabSpec = spec
	case yaml.MappingNode:
		// Decode the inline lab as a lab file of its own, then move any
		// error back to its line here: the re-encoded text keeps the
		// structure, so the field path locates it.
		b, err := yaml.Marshal(n)
		if err != nil {
			return doc.Errorf("lab", "%v", err)
		}
		spec, err := emu.Parse(s.File+" (lab)", b)
		if err != nil {
			var ye *yamlfile.Error
			if errors.As(err, &ye) {
				path := "lab"
				if ye.Field != "" {
					path += "." + ye.Field
				}
				return doc.Errorf(path, "%s", ye.Msg)
			}
			return doc.Errorf("lab", "%v", err)
		}
		spec.File = s.File
		s.LabSpec = spec
	default:
		return doc.Errorf("lab", "want a lab file path or an inline lab mapping")
	}
	g, err := s.LabSpec.Resolve()
	if err != nil {
		return doc.Errorf("lab", "%v", err)
	}
	s.graph = g
	return nil
}

// mappingKeys lists the keys of the mapping at key in root, in file order.
func mappingKeys(root *yaml.Node, key string) []string {
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value == key && root.Content[i+1].Kind == yaml.MappingNode {
			var out []string
			m := root.Content[i+1]
			for j := 0; j+1 < len(m.Content); j += 2 {
				out = append(out, m.Content[j].Value)
			}
			return out
		}
	}
	return nil
}

// nameRE-equivalent check for experiment names: they name directories.
func validName(n string) bool {
	if n == "" || len(n) > 64 {
		return false
	}
	for _, r := range n {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return n[0] != '.'
}

func (s *Spec) validate() error {
	f := yamlfile.Field
	if !validName(s.Name) {
		return f("name", "want a name of letters, digits, '-', '_' or '.' (it names the run directory), got %q", s.Name)
	}
	if len(s.Schemes) == 0 {
		return f("schemes", "at least one scheme is required, e.g. tcp-droptail: {cc: cubic}")
	}
	for _, name := range s.SchemeOrder {
		if err := s.validateScheme(name); err != nil {
			return err
		}
	}
	if err := yamlfile.In("traffic", s.validateTraffic()); err != nil {
		return err
	}
	if err := yamlfile.In("sweep", s.validateSweep(s.Sweep)); err != nil {
		return err
	}
	if s.Duration <= 0 {
		return f("duration", "want a positive duration such as 30s, got %v", s.Duration)
	}
	if s.Trials < 0 {
		return f("trials", "want at least 1, got %d", s.Trials)
	}
	if s.Trials == 0 {
		s.Trials = 1
	}
	if q := s.Quick; q != nil {
		if q.Duration < 0 {
			return f("quick.duration", "want a positive duration, got %v", q.Duration)
		}
		if q.Trials < 0 {
			return f("quick.trials", "want at least 1, got %d", q.Trials)
		}
		if q.Sweep != nil {
			if err := yamlfile.In("quick.sweep", s.validateSweep(*q.Sweep)); err != nil {
				return err
			}
		}
	}
	if err := yamlfile.In("measure", s.validateMeasure()); err != nil {
		return err
	}
	if _, ok := paper.Tables[s.Paper]; s.Paper != "" && !ok {
		return f("paper", "unknown table %q (want one of %s)", s.Paper, strings.Join(paper.IDs(), ", "))
	}
	return nil
}

func (s *Spec) validateScheme(name string) error {
	sc := s.Schemes[name]
	path := "schemes." + name
	if !validName(name) {
		return yamlfile.Field(path, "scheme names name directories: use letters, digits, '-', '_' or '.', got %q", name)
	}
	if sc.CC == "" {
		return yamlfile.Field(path+".cc", "is required (one of %s)", strings.Join(knownCC, ", "))
	}
	if !slices.Contains(knownCC, sc.CC) {
		return yamlfile.Field(path+".cc", "unknown congestion control %q (want one of %s)", sc.CC, strings.Join(knownCC, ", "))
	}
	if err := sc.Ports.Validate(s.graph.Tiers); err != nil {
		return yamlfile.In(path+".ports", err)
	}
	// The merged lab must still resolve (a threshold above the lab's
	// buffer, a rate of zero...): check it now, before anything is built.
	merged := s.labFor(sc, s.LabSpec.Name)
	if err := merged.Validate(); err != nil {
		msg := err.Error()
		var ye *yamlfile.Error
		if errors.As(err, &ye) {
			msg = ye.Msg
			if ye.Field != "" {
				msg = ye.Field + ": " + ye.Msg
			}
		}
		return yamlfile.Field(path+".ports", "with the lab's settings: %s", msg)
	}
	// Resolve every port as Up will, so a port that cannot be built (a
	// threshold above the buffer) is found now.
	for _, node := range s.graph.Nodes {
		for _, i := range node.Ifaces {
			if _, err := merged.Port(i); err != nil {
				return yamlfile.Field(path+".ports", "merged with the lab's settings: port %v", err)
			}
		}
	}
	for i, c := range sc.DSCP {
		if c.Below == 0 {
			return yamlfile.Field(fmt.Sprintf("%s.dscp[%d].below", path, i), "want a positive flow size, e.g. 10KB")
		}
	}
	return nil
}

// labFor is the lab spec with a scheme's port settings merged over the
// lab's, named name.
func (s *Spec) labFor(sc Scheme, name string) *emu.Spec {
	l := *s.LabSpec
	l.Name = name
	l.Ports = mergePorts(s.LabSpec.Ports, sc.Ports)
	// The scheme's congestion control is also every host's default, so
	// that listening sockets have it too: Linux accepts ECN on an ECT SYN
	// (DCTCP sends its SYN as ECT) only when the listener's congestion
	// control needs ECN (tcp_ecn_create_request), and the endpoints set
	// their congestion control per connection, after the handshake.
	sys := map[string]string{}
	for k, v := range s.LabSpec.Hosts.Sysctls {
		sys[k] = v
	}
	// Only for those: outside the initial namespace Linux lets the default
	// be set only to a congestion control in tcp_allowed_congestion_control.
	if needsECN(sc.CC) {
		sys["net.ipv4.tcp_congestion_control"] = sc.CC
	}
	l.Hosts.Sysctls = sys
	// The scheme decides where pacers run (on the data senders, see
	// trial); the lab file's pacer sections only give their parameters.
	l.Hosts = l.Hosts.WithoutPacing()
	return &l
}

// mergePorts layers top over base: defaults, each tier and each override
// merge field by field (tc.PortSpec.Merge).
func mergePorts(base, top tc.PortsSpec) tc.PortsSpec {
	out := tc.PortsSpec{PortSpec: base.PortSpec.Merge(top.PortSpec)}
	merge := func(a, b map[string]tc.PortSpec) map[string]tc.PortSpec {
		if len(a)+len(b) == 0 {
			return nil
		}
		m := map[string]tc.PortSpec{}
		for k, v := range a {
			m[k] = v
		}
		for k, v := range b {
			m[k] = m[k].Merge(v)
		}
		return m
	}
	out.Tiers = merge(base.Tiers, top.Tiers)
	out.Overrides = merge(base.Overrides, top.Overrides)
	return out
}

// needsECN says whether a congestion control is DCTCP-like (it relies on
// ECN marks and sends its SYN as ECT).
func needsECN(cc string) bool { return cc == "dctcp" || cc == "fabric_dctcp" }

// host checks that name is a host of the lab.
func (s *Spec) host(path, name string) error {
	n := s.graph.Node(name)
	if n == nil || n.Kind != emu.Host {
		return yamlfile.Field(path, "lab %s has no host %q (hosts: %s)", s.LabSpec.Name, name, hostNames(s.graph, 6))
	}
	return nil
}

func hostNames(g *emu.Graph, max int) string {
	var names []string
	for i, h := range g.Hosts() {
		if i == max {
			names = append(names, "...")
			break
		}
		names = append(names, h.Name)
	}
	return strings.Join(names, ", ")
}

func (s *Spec) validateTraffic() error {
	t := &s.Traffic
	f := yamlfile.Field
	if !slices.Contains(trafficPatterns, t.Pattern) {
		return f("pattern", "want one of %s, got %q", strings.Join(trafficPatterns, ", "), t.Pattern)
	}
	for _, l := range []struct {
		path string
		list HostList
	}{{"client", t.Client}, {"servers", t.Servers}} {
		for i, h := range l.list {
			if h == "all" || h == "rest" {
				if len(l.list) > 1 {
					return f(fmt.Sprintf("%s[%d]", l.path, i), "%q stands alone, not in a list", h)
				}
				continue
			}
			if err := s.host(l.path, h); err != nil {
				return err
			}
		}
	}
	if t.Pattern != "permutation" {
		if len(t.Client) == 0 {
			return f("client", "pattern %s needs a client host", t.Pattern)
		}
		if len(t.Servers) == 0 {
			return f("servers", "pattern %s needs servers (host names, all or rest)", t.Pattern)
		}
		if len(s.clients()) == 0 {
			return f("client", "names no host")
		}
		if len(s.servers()) == 0 {
			return f("servers", "names no host")
		}
	}
	if t.Load != 0 && !(t.Load > 0 && t.Load < 1) {
		return f("load", "want a fraction of the link rate in (0, 1), got %v", t.Load)
	}
	switch t.Pattern {
	case "dynamic":
		if t.Workload == "" {
			return f("workload", "the dynamic pattern needs a flow-size workload (e.g. hull_1k_10m)")
		}
		cdf, err := workload.Open(t.Workload, nil)
		if err != nil {
			return f("workload", "%v", err)
		}
		s.cdf = cdf
		if t.Load == 0 && len(s.Sweep.Load) == 0 {
			return f("load", "the dynamic pattern needs a load (here or in sweep.load)")
		}
		if t.Conns < 0 {
			return f("conns", "want at least 1, got %d", t.Conns)
		}
	case "incast":
		if t.Size == 0 && len(s.Sweep.Size) == 0 {
			return f("size", "the incast pattern needs the response size S, e.g. 64KB")
		}
		if t.Senders < 0 || t.Senders > len(s.servers()) {
			return f("senders", "want 1..%d (the servers listed), got %d", len(s.servers()), t.Senders)
		}
	case "static", "permutation":
		if t.Flows < 0 {
			return f("flows", "want at least 1, got %d", t.Flows)
		}
		if t.Pattern == "static" && (t.Senders < 0 || t.Senders > len(s.clients())) {
			return f("senders", "want 1..%d (the clients listed), got %d", len(s.clients()), t.Senders)
		}
	}
	if t.Pattern == "permutation" && len(s.graph.Hosts()) < 2 {
		return f("pattern", "permutation needs at least 2 hosts")
	}
	return nil
}

// sweepable says which traffic fields a sweep key varies, for which
// patterns.
var sweepable = map[string][]string{
	"load":    {"dynamic"},
	"senders": {"incast", "static"},
	"flows":   {"static", "permutation"},
	"size":    {"incast"},
}

func (s *Spec) validateSweep(w Sweep) error {
	f := yamlfile.Field
	for i, name := range w.Scheme {
		if name == "all" && len(w.Scheme) == 1 {
			continue
		}
		if _, ok := s.Schemes[name]; !ok {
			return f(fmt.Sprintf("scheme[%d]", i), "no scheme %q (schemes: %s)", name, strings.Join(s.SchemeOrder, ", "))
		}
	}
	used := map[string]int{"load": len(w.Load), "senders": len(w.Senders), "flows": len(w.Flows), "size": len(w.Size)}
	for _, key := range []string{"load", "senders", "flows", "size"} {
		if used[key] == 0 {
			continue
		}
		if !slices.Contains(sweepable[key], s.Traffic.Pattern) {
			return f(key, "the %s pattern has no field %q to sweep (it applies to %s)", s.Traffic.Pattern, key, strings.Join(sweepable[key], ", "))
		}
	}
	for i, l := range w.Load {
		if !(l > 0 && l < 1) {
			return f(fmt.Sprintf("load[%d]", i), "want a fraction of the link rate in (0, 1), got %v", l)
		}
	}
	limit := len(s.servers())
	if s.Traffic.Pattern == "static" {
		limit = len(s.clients())
	}
	for i, n := range w.Senders {
		if n < 1 || n > limit {
			return f(fmt.Sprintf("senders[%d]", i), "want 1..%d, got %d", limit, n)
		}
	}
	for i, n := range w.Flows {
		if n < 1 {
			return f(fmt.Sprintf("flows[%d]", i), "want at least 1, got %d", n)
		}
	}
	for i, n := range w.Size {
		if n == 0 {
			return f(fmt.Sprintf("size[%d]", i), "want a positive size")
		}
	}
	return nil
}

func (s *Spec) validateMeasure() error {
	if w := s.Measure.Warmup; w < 0 || w >= s.Duration {
		return yamlfile.Field("warmup", "want a warm-up shorter than the duration (%v), got %v", s.Duration, w)
	}
	if l := s.Measure.LMM; l != nil {
		sw := s.graph.Node(l.Switch)
		if sw == nil || sw.Kind != emu.Switch {
			return yamlfile.Field("lmm.switch", "lab %s has no switch %q", s.LabSpec.Name, l.Switch)
		}
		if len(l.From) == 0 {
			return yamlfile.Field("lmm.from", "want the ingress interfaces of %s, e.g. [eth1]", l.Switch)
		}
		for i, ifn := range append(append([]string{}, l.From...), l.To) {
			path := fmt.Sprintf("lmm.from[%d]", i)
			if i == len(l.From) {
				path = "lmm.to"
			}
			if sw.Iface(ifn) == nil {
				return yamlfile.Field(path, "switch %s has no interface %q", l.Switch, ifn)
			}
		}
	}
	if p := s.Measure.Probe; p != nil {
		if err := s.host("probe.from", p.From); err != nil {
			return err
		}
		if err := s.host("probe.to", p.To); err != nil {
			return err
		}
	}
	return nil
}

// clients and servers expand the traffic section's host lists.
func (s *Spec) clients() []string { return s.expand(s.Traffic.Client, s.Traffic.Servers) }
func (s *Spec) servers() []string { return s.expand(s.Traffic.Servers, s.Traffic.Client) }

func (s *Spec) expand(list, other HostList) []string {
	if len(list) == 1 && (list[0] == "all" || list[0] == "rest") {
		var out []string
		excl := map[string]bool{}
		if list[0] == "rest" {
			for _, h := range other {
				excl[h] = true
			}
		}
		for _, h := range s.graph.Hosts() {
			if !excl[h.Name] {
				out = append(out, h.Name)
			}
		}
		return out
	}
	return list
}

// WithQuick returns the spec with its quick variant applied.
func (s *Spec) WithQuick() *Spec {
	c := *s
	c.IsQuick = true
	if q := s.Quick; q != nil {
		if q.Duration > 0 {
			c.Duration = q.Duration
		}
		if q.Trials > 0 {
			c.Trials = q.Trials
		}
		if q.Sweep != nil {
			c.Sweep = *q.Sweep
		}
	}
	return &c
}
