package emu

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/fabric-emu/fabric/hosts"
	"github.com/fabric-emu/fabric/hosts/cc"

	"github.com/fabric-emu/fabric/internal/units"
	"github.com/fabric-emu/fabric/internal/yamlfile"
	"github.com/fabric-emu/fabric/tc"
	"github.com/fabric-emu/fabric/tc/pacer"
)

// Spec is a lab file as written by the user (see examples/*.yaml and
// docs/labs.md). Load reads and validates it; Resolve turns it into a
// Graph of nodes, interfaces, addresses and routes.
type Spec struct {
	Name     string         `yaml:"name" json:"name"`
	Topology TopologySpec   `yaml:"topology" json:"topology"`
	Links    LinkClasses    `yaml:"links,omitempty" json:"links,omitempty"`
	Ports    tc.SwitchPorts `yaml:"ports,omitempty" json:"ports,omitempty"`
	Hosts    HostsSpec      `yaml:"hosts,omitempty" json:"hosts,omitempty"`

	// File is where the spec was read from ("" for specs built in Go).
	File     string `yaml:"-" json:"file,omitempty"`
	doc      *yamlfile.Doc
	resolved *resolution // see Resolve
}

// Topology kinds.
const (
	KindFatTree   = "fattree"
	KindLeafSpine = "leafspine"
	KindStar      = "star"
	KindDumbbell  = "dumbbell"
	KindCustom    = "custom"
)

// TopologySpec selects a generator and its parameters.
type TopologySpec struct {
	Kind string `yaml:"kind" json:"kind"`

	K int `yaml:"k,omitempty" json:"k,omitempty"` // fattree: even, ≥ 4

	Leaves       int `yaml:"leaves,omitempty" json:"leaves,omitempty"` // leafspine
	Spines       int `yaml:"spines,omitempty" json:"spines,omitempty"`
	HostsPerLeaf int `yaml:"hosts_per_leaf,omitempty" json:"hosts_per_leaf,omitempty"`

	Hosts int `yaml:"hosts,omitempty" json:"hosts,omitempty"` // star

	Left  int `yaml:"left,omitempty" json:"left,omitempty"` // dumbbell: hosts on each side
	Right int `yaml:"right,omitempty" json:"right,omitempty"`

	Nodes map[string]NodeSpec `yaml:"nodes,omitempty" json:"nodes,omitempty"` // custom
	Links []CustomLink        `yaml:"links,omitempty" json:"links,omitempty"`
}

// NodeSpec is one node of a custom topology.
type NodeSpec struct {
	Kind    string `yaml:"kind" json:"kind"`                           // host | switch
	Tier    string `yaml:"tier,omitempty" json:"tier,omitempty"`       // switch tier for `ports.tiers`
	Address string `yaml:"address,omitempty" json:"address,omitempty"` // host IPv4, e.g. 10.9.0.2/24 (gateway .1)
}

// CustomLink is one link of a custom topology, containerlab style.
type CustomLink struct {
	Endpoints []string    `yaml:"endpoints" json:"endpoints"` // ["h1:eth0", "s1:eth1"]
	Rate      *units.Rate `yaml:"rate,omitempty" json:"rate,omitempty"`
	MTU       int         `yaml:"mtu,omitempty" json:"mtu,omitempty"`
	Delay     *Delay      `yaml:"delay,omitempty" json:"delay,omitempty"` // up: endpoints[0] → endpoints[1]
	Loss      *Loss       `yaml:"loss,omitempty" json:"loss,omitempty"`
}

// LinkDefaults are the settings of a class of links: rate, MTU, offloads,
// and the link's delay and loss (see Delay).
type LinkDefaults struct {
	Rate     *units.Rate `yaml:"rate,omitempty" json:"rate,omitempty"`
	MTU      int         `yaml:"mtu,omitempty" json:"mtu,omitempty"`
	Offloads *bool       `yaml:"offloads,omitempty" json:"offloads,omitempty"` // TSO/GSO/GRO; off unless true
	Delay    *Delay      `yaml:"delay,omitempty" json:"delay,omitempty"`
	Loss     *Loss       `yaml:"loss,omitempty" json:"loss,omitempty"`
}

// LinkClasses holds link defaults, overridable for host links (host to
// switch) and fabric links (switch to switch), and then per custom link.
type LinkClasses struct {
	LinkDefaults `yaml:",inline"`
	Host         LinkDefaults `yaml:"host,omitempty" json:"host,omitempty"`
	Fabric       LinkDefaults `yaml:"fabric,omitempty" json:"fabric,omitempty"`
}

// HostsSpec sets how hosts run and what their NICs look like.
type HostsSpec struct {
	Runtime string `yaml:"runtime,omitempty" json:"runtime,omitempty"` // netns (default) | docker
	Image   string `yaml:"image,omitempty" json:"image,omitempty"`     // docker image
	// Hold keeps every host's container idle under a fabric sleep instead
	// of running the image's command (an experiment's transport image, whose
	// command runs once per trial). Experiments set it; lab files cannot.
	Hold    bool              `yaml:"-" json:"hold,omitempty"`
	Sysctls map[string]string `yaml:"sysctls,omitempty" json:"sysctls,omitempty"` // applied in every host namespace
	// CC is the hosts' default TCP congestion control (cubic, reno, bbr,
	// dctcp). dctcp comes from the kernel when it has it, otherwise from
	// fabric's BPF struct_ops, registered for as long as the lab is up.
	CC  string          `yaml:"cc,omitempty" json:"cc,omitempty"`
	NIC tc.PortSettings `yaml:"nic,omitempty" json:"nic,omitempty"` // host egress queue
	// Pacer puts HULL's pacer (tc/pacer) on every host's NIC with these
	// parameters ({} for the defaults). Its rate controller runs in the
	// process that brought the lab up; `fabric up` leaves one behind.
	Pacer *PacerSpec `yaml:"pacer,omitempty" json:"pacer,omitempty"`
	// RTOMin is the hosts' minimum TCP retransmission timeout, set on
	// their routes (Linux's is 200ms): a timer that the scaling rule
	// multiplies with every other time (docs/design.md).
	RTOMin time.Duration `yaml:"rto_min,omitempty" json:"rto_min,omitempty"`
	// QuickAck turns delayed ACKs off on the hosts' routes: Linux's delayed
	// ACK timer (40 ms at least) cannot be scaled.
	QuickAck bool `yaml:"quickack,omitempty" json:"quickack,omitempty"`
	// Overrides are settings for single hosts, by host name.
	Overrides map[string]HostOverride `yaml:"overrides,omitempty" json:"overrides,omitempty"`
}

// HostOverride is what one host sets differently from the lab's hosts.
type HostOverride struct {
	// Pacer changes fields of hosts.pacer for this host, or paces only
	// this host when hosts.pacer is unset; {enabled: false} turns it off.
	Pacer *PacerSpec `yaml:"pacer,omitempty" json:"pacer,omitempty"`
}

// PacerSpec is a `pacer:` section: the pacer's parameters (tc/pacer
// README) and whether it is on.
type PacerSpec struct {
	Enabled      *bool `yaml:"enabled,omitempty" json:"enabled,omitempty"` // unset: on
	pacer.Config `yaml:",inline"`
}

func (p *PacerSpec) on() bool { return p != nil && (p.Enabled == nil || *p.Enabled) }

// PacerConfig is host's pacer: hosts.pacer merged with the host's
// override, line_rate defaulting to its link's rate, and whether the lab
// file turns it on. The parameters are returned even when it is off, for
// experiments that switch pacing on per scheme.
func (s *Spec) PacerConfig(host *Node) (cfg pacer.Config, on bool) {
	if s.Hosts.Pacer != nil {
		cfg, on = s.Hosts.Pacer.Config, s.Hosts.Pacer.on()
	}
	if o := s.Hosts.Overrides[host.Name].Pacer; o != nil {
		cfg, on = cfg.Merge(o.Config), o.on()
	}
	if cfg.LineRate == 0 && len(host.Ifaces) > 0 {
		cfg.LineRate = host.Ifaces[0].Link.Rate
	}
	return cfg, on
}

// WithoutPacing returns h with every pacer turned off but its parameters
// kept (see PacerConfig).
func (h HostsSpec) WithoutPacing() HostsSpec {
	off := func(p *PacerSpec) *PacerSpec {
		if p == nil {
			return nil
		}
		c := *p
		c.Enabled = new(bool)
		return &c
	}
	h.Pacer = off(h.Pacer)
	if h.Overrides != nil {
		o := make(map[string]HostOverride, len(h.Overrides))
		for name, v := range h.Overrides {
			v.Pacer = off(v.Pacer)
			o[name] = v
		}
		h.Overrides = o
	}
	return h
}

// Defaults that apply when a lab file does not say.
const (
	DefaultRate = 100 * units.Mbit // what a k=4 fat tree can carry on 2 cores (docs/design.md)
	DefaultMTU  = 1500
	maxLabName  = 24
)

var (
	labNameRE  = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)
	nodeNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]*$`)
	ifNameRE   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]*$`)
)

// Load reads and validates a lab file. Every error names the file, the
// line and the field, and is an *yamlfile.Error.
func Load(file string) (*Spec, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, &yamlfile.Error{File: file, Msg: err.Error()}
	}
	return Parse(file, data)
}

// Parse is Load for bytes already in memory; file names them in errors.
func Parse(file string, data []byte) (*Spec, error) {
	s, err := Decode(file, data)
	if err != nil {
		return nil, err
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return s, nil
}

// Decode reads a lab file without checking it (Validate): a lab written
// at a paper's rates and times holds settings that only its scaled copy
// (Scaled) can run, such as a pacer interval shorter than a userspace
// loop keeps, so it is checked once scaled.
func Decode(file string, data []byte) (*Spec, error) {
	var s Spec
	doc, err := yamlfile.Decode(file, data, &s)
	if err != nil {
		return nil, err
	}
	s.File, s.doc = file, doc
	return &s, nil
}

// Validate checks the spec and resolves it once, so that every error a
// build could hit for bad input is found before anything is created. For
// specs read from a file, errors carry the file and line.
func (s *Spec) Validate() error {
	err := s.validate()
	if err == nil {
		_, err = s.Resolve()
	}
	if err == nil {
		return nil
	}
	if s.doc != nil {
		return s.doc.Wrap(err)
	}
	return err
}

// Locate returns the line of the field at path in the spec's file (0 for
// specs built in Go), for tools that report on a lab file.
func (s *Spec) Locate(path string) int { return s.doc.Locate(path) }

// Wrap turns a FieldError into a file:line: field error for this spec's
// file (unchanged for specs built in Go).
func (s *Spec) Wrap(err error) error {
	if s.doc == nil {
		return err
	}
	return s.doc.Wrap(err)
}

func (s *Spec) validate() error {
	switch {
	case s.Name == "":
		return yamlfile.Field("name", "is required (a lab name such as ft4)")
	case len(s.Name) > maxLabName || !labNameRE.MatchString(s.Name):
		return yamlfile.Field("name", "%q must be 1-%d characters of a-z, 0-9 and '-', starting with a letter or digit", s.Name, maxLabName)
	}
	if err := yamlfile.In("links", s.Links.validate()); err != nil {
		return err
	}
	if !hosts.IsNetNS(s.Hosts.Runtime) {
		if _, err := hosts.Lookup(s.Hosts.Runtime); err != nil {
			return yamlfile.Field("hosts.runtime", "%v", err)
		}
	}
	if hosts.IsNetNS(s.Hosts.Runtime) && s.Hosts.Image != "" {
		return yamlfile.Field("hosts.image", "is only used with runtime: docker")
	}
	if s.Hosts.CC != "" && !cc.Known(s.Hosts.CC) {
		return yamlfile.Field("hosts.cc", "unknown congestion control %q: want one of %s", s.Hosts.CC, strings.Join(cc.Names, ", "))
	}
	if r := s.Hosts.RTOMin; r != 0 && (r < time.Millisecond || r%time.Millisecond != 0) {
		return yamlfile.Field("hosts.rto_min", "want whole milliseconds, at least 1ms (the route metric's unit), got %v", r)
	}
	for _, k := range sortedKeys(s.Hosts.Sysctls) {
		if !validSysctl(k) {
			return yamlfile.Field("hosts.sysctls."+k, "not a namespaced network sysctl (want net.ipv4.* , net.ipv6.* or net.core.*)")
		}
	}
	if p := s.Hosts.Pacer; p != nil {
		if _, err := p.Config.Resolve(); err != nil {
			return yamlfile.In("hosts.pacer", err)
		}
	}
	for _, name := range sortedKeys(s.Hosts.Overrides) {
		if p := s.Hosts.Overrides[name].Pacer; p != nil {
			if _, err := p.Config.Resolve(); err != nil {
				return yamlfile.In("hosts.overrides."+name+".pacer", err)
			}
		}
	}
	return nil
}

// validateHosts checks what needs the topology: override names, and each
// host's merged pacer against its link rate.
func (s *Spec) validateHosts(g *Graph) error {
	for _, name := range sortedKeys(s.Hosts.Overrides) {
		if n := g.Node(name); n == nil || n.Kind != HostNode {
			return yamlfile.Field("hosts.overrides."+name, "no host %q in this topology", name)
		}
	}
	for _, h := range g.Hosts() {
		cfg, on := s.PacerConfig(h)
		if !on {
			continue
		}
		if _, err := cfg.Resolve(); err != nil {
			path := "hosts.pacer"
			if s.Hosts.Overrides[h.Name].Pacer != nil {
				path = "hosts.overrides." + h.Name + ".pacer"
			}
			var fe *yamlfile.FieldError
			if errors.As(err, &fe) { // name the host: its link rate may be why
				err = &yamlfile.FieldError{Path: fe.Path, Err: fmt.Errorf("host %s: %w", h.Name, fe.Err)}
			}
			return yamlfile.In(path, err)
		}
	}
	return nil
}

func (l LinkClasses) validate() error {
	for path, d := range map[string]LinkDefaults{"": l.LinkDefaults, "host": l.Host, "fabric": l.Fabric} {
		if d.MTU != 0 && (d.MTU < 576 || d.MTU > 65535) {
			p := "mtu"
			if path != "" {
				p = path + ".mtu"
			}
			return yamlfile.Field(p, "%d is out of range (576-65535)", d.MTU)
		}
	}
	return nil
}

// validSysctl accepts the network sysctls that are per namespace. Dots
// and slashes separate levels; ".." would escape /proc/sys.
func validSysctl(k string) bool {
	if strings.Contains(k, "..") || strings.ContainsAny(k, " \t") {
		return false
	}
	for _, p := range []string{"net.ipv4.", "net.ipv6.", "net.core.", "net/ipv4/", "net/ipv6/", "net/core/"} {
		if strings.HasPrefix(k, p) {
			return true
		}
	}
	return false
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// RuntimeName is the hosts' runtime, RuntimeNetNS when the file leaves it
// unset.
func (h HostsSpec) RuntimeName() string {
	if hosts.IsNetNS(h.Runtime) {
		return hosts.RuntimeNetNS
	}
	return h.Runtime
}

// String summarises the topology ("fattree k=4").
func (t TopologySpec) String() string {
	switch t.Kind {
	case KindFatTree:
		return fmt.Sprintf("fattree k=%d", t.K)
	case KindLeafSpine:
		return fmt.Sprintf("leafspine %d×%d", t.Leaves, t.Spines)
	case KindDumbbell:
		return fmt.Sprintf("dumbbell %d+%d", t.Left, t.Right)
	}
	return t.Kind
}

// FileError is what Load and Parse return for a bad lab file: the file,
// the line (0 when unknown), the field's dotted path and the problem.
// Match it with errors.As. Experiment files return the same type
// (experiments.FileError).
type FileError = yamlfile.Error
