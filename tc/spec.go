package tc

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/fabric-emu/fabric/internal/units"
	"github.com/fabric-emu/fabric/internal/yamlfile"
)

// PortSettings is one layer of port settings as written in a lab file. Every
// field is optional so that layers (defaults, tier, one port) can be merged;
// Resolve validates the merged result into a Port.
type PortSettings struct {
	Rate    *units.Rate  `yaml:"rate,omitempty" json:"rate,omitempty"`
	Buffer  *Buffer      `yaml:"buffer,omitempty" json:"buffer,omitempty"`
	Queues  *QueuesSpec  `yaml:"queues,omitempty" json:"queues,omitempty"`
	Marking *MarkingSpec `yaml:"marking,omitempty" json:"marking,omitempty"`
	// NDP makes the port an NDP switch port (ndp.go): a header band and a
	// data band of a few packets, served 10 : 1, with trimming.
	NDP *NDPSpec `yaml:"ndp,omitempty" json:"ndp,omitempty"`
}

// Buffer is a drop-tail limit in bytes ("700KB") or packets ("100pkts").
type Buffer struct {
	Bytes   units.Size `json:"bytes,omitempty"`
	Packets int        `json:"packets,omitempty"`
}

// QueuesSpec selects strict-priority bands or weighted classes, and fair
// queueing within each band:
//
//	queues: {bands: 4}                           # strict priority, CS7 first
//	queues: {weights: [4, 1]}                    # two weighted classes
//	queues: {weights: [4, 1], fair: true}        # ... each fair-queued over 16 flow buckets
//	queues: {bands: 2, fair: true, buckets: 8}   # strict bands, 8 buckets each
//
// With fair, every band is split into Buckets hashed flow buckets of equal
// quantum (stochastic fair queueing, fair.go); the buffer is the band's,
// shared out equally among its buckets.
type QueuesSpec struct {
	Bands    int    `yaml:"bands,omitempty" json:"bands,omitempty"`
	Classify string `yaml:"classify,omitempty" json:"classify,omitempty"`
	Weights  []int  `yaml:"weights,omitempty" json:"weights,omitempty"`
	Fair     bool   `yaml:"fair,omitempty" json:"fair,omitempty"`
	Buckets  int    `yaml:"buckets,omitempty" json:"buckets,omitempty"` // with fair; default DefaultBuckets
}

// MarkingSpec chooses at most one ECN marker.
type MarkingSpec struct {
	ECN     *ECNSpec     `yaml:"ecn,omitempty" json:"ecn,omitempty"`
	Phantom *PhantomSpec `yaml:"phantom,omitempty" json:"phantom,omitempty"`
}

// ECNSpec is DCTCP-style threshold marking: CE when the queue is ≥ K.
type ECNSpec struct {
	Threshold units.Size `yaml:"threshold" json:"threshold"`
}

// PhantomSpec is HULL's phantom queue (§2.1): a counter drained at
// Drain×rate that marks CE above Threshold.
type PhantomSpec struct {
	Drain     float64    `yaml:"drain" json:"drain"`
	Threshold units.Size `yaml:"threshold" json:"threshold"`
}

// SwitchPorts is the `ports:` section of a lab file: defaults for every
// switch egress port, overridden per tier and then per port ("s0:eth1").
type SwitchPorts struct {
	PortSettings `yaml:",inline"`
	Tiers        map[string]PortSettings `yaml:"tiers,omitempty" json:"tiers,omitempty"`
	Overrides    map[string]PortSettings `yaml:"overrides,omitempty" json:"overrides,omitempty"`
}

// DefaultBuffer is the drop-tail limit of a port whose lab file gives none:
// 150 KB, about 100 full-size frames. That is the per-port share of a
// shallow-buffered datacenter switch (a ~10 MB shared buffer over 64 ports),
// and 1.2 ms of queue at 1 Gbit.
const DefaultBuffer = 150 * units.KB

// frameOverhead is what a full-size IP packet gains on the wire of a veth:
// the Ethernet header. Qdiscs count skb->len, which includes it.
const frameOverhead = 14

// UnmarshalYAML accepts a byte size ("700KB", "1.5MB", 150000) or a packet
// count ("100pkts", "100 packets").
func (b *Buffer) UnmarshalYAML(n *yaml.Node) error {
	v, err := ParseBuffer(n.Value)
	if err != nil {
		return yamlfile.LineError(n, "%v", err)
	}
	*b = v
	return nil
}

// MarshalYAML writes the buffer the way it is read.
func (b Buffer) MarshalYAML() (any, error) { return b.String(), nil }

func (b Buffer) String() string {
	if b.Packets > 0 {
		return fmt.Sprintf("%dpkts", b.Packets)
	}
	return b.Bytes.String()
}

// ParseBuffer parses "700KB" or "100pkts".
func ParseBuffer(s string) (Buffer, error) {
	t := strings.TrimSpace(s)
	for _, suffix := range []string{"packets", "packet", "pkts", "pkt", "p"} {
		if num, ok := strings.CutSuffix(t, suffix); ok && num != "" && num[len(num)-1] != 'B' {
			n, err := strconv.Atoi(strings.TrimSpace(num))
			if err != nil || n <= 0 {
				return Buffer{}, fmt.Errorf("buffer %q: want a positive whole number of packets, e.g. 100pkts", s)
			}
			return Buffer{Packets: n}, nil
		}
	}
	v, err := units.ParseSize(t)
	if err != nil {
		return Buffer{}, fmt.Errorf("buffer: %w, or a packet count such as 100pkts", err)
	}
	if v == 0 {
		return Buffer{}, fmt.Errorf("buffer %q: must be positive", s)
	}
	return Buffer{Bytes: v}, nil
}

// BytesAt is the buffer in bytes for a given MTU: a packet count counts
// full-size frames.
func (b Buffer) BytesAt(mtu int) units.Size {
	if b.Packets > 0 {
		return units.Size(b.Packets * (mtu + frameOverhead))
	}
	return b.Bytes
}

// For merges the layers that apply to one egress port: the defaults, then
// the port's tier, then an override for "node:ifname". A layer replaces
// whole fields: an override's marking replaces the tier's marking rather
// than merging into it, so ecn and phantom never combine by accident.
func (p *SwitchPorts) For(node, tier, ifname string) PortSettings {
	if p == nil {
		return PortSettings{}
	}
	out := p.PortSettings
	if t, ok := p.Tiers[tier]; ok {
		out = out.Merge(t)
	}
	if o, ok := p.Overrides[node+":"+ifname]; ok {
		out = out.Merge(o)
	}
	return out
}

// Merge layers top over p: the defaults, each tier and each override merge
// field by field (PortSettings.Merge). An experiment's scheme is merged over
// the lab's ports this way.
func (p SwitchPorts) Merge(top SwitchPorts) SwitchPorts {
	out := SwitchPorts{PortSettings: p.PortSettings.Merge(top.PortSettings)}
	merge := func(a, b map[string]PortSettings) map[string]PortSettings {
		if len(a)+len(b) == 0 {
			return nil
		}
		m := map[string]PortSettings{}
		for k, v := range a {
			m[k] = v
		}
		for k, v := range b {
			m[k] = m[k].Merge(v)
		}
		return m
	}
	out.Tiers = merge(p.Tiers, top.Tiers)
	out.Overrides = merge(p.Overrides, top.Overrides)
	return out
}

// Layer is the settings one part of the ports section gives a port, merged
// over the defaults, and where it was written (Path: "ports",
// "ports.tiers.core", "ports.overrides.s0:eth1").
type Layer struct {
	Path     string
	Settings PortSettings
}

// Layers lists the defaults, each tier and each override as the ports that
// they reach see them, in a stable order: what a check of every written
// setting (fabric doctor's needs) walks.
func (p SwitchPorts) Layers(path string) []Layer {
	out := []Layer{{path, p.PortSettings}}
	for _, t := range sortedKeys(p.Tiers) {
		out = append(out, Layer{path + ".tiers." + t, p.PortSettings.Merge(p.Tiers[t])})
	}
	for _, o := range sortedKeys(p.Overrides) {
		out = append(out, Layer{path + ".overrides." + o, p.PortSettings.Merge(p.Overrides[o])})
	}
	return out
}

// Merge returns s with every field that top sets replaced by top's.
func (s PortSettings) Merge(top PortSettings) PortSettings {
	if top.Rate != nil {
		s.Rate = top.Rate
	}
	if top.Buffer != nil {
		s.Buffer = top.Buffer
	}
	if top.Queues != nil {
		s.Queues = top.Queues
	}
	if top.Marking != nil {
		s.Marking = top.Marking
	}
	if top.NDP != nil {
		s.NDP = top.NDP
	}
	return s
}

// Validate checks what can be checked before the topology is known: tier
// names, override keys and each layer's own values. Paths are relative to
// the ports section ("tiers.edge.buffer", "overrides.s0:eth1.marking").
func (p *SwitchPorts) Validate(knownTiers []string) error {
	if p == nil {
		return nil
	}
	if err := p.PortSettings.validateLayer(); err != nil {
		return err
	}
	for _, name := range sortedKeys(p.Tiers) {
		if !slices.Contains(knownTiers, name) {
			return yamlfile.Field("tiers."+name, "unknown tier %q (this topology has %s)", name, quoteList(knownTiers))
		}
		if err := p.Tiers[name].validateLayer(); err != nil {
			return yamlfile.In("tiers."+name, err)
		}
	}
	for _, key := range sortedKeys(p.Overrides) {
		node, ifname, ok := strings.Cut(key, ":")
		if !ok || node == "" || ifname == "" || strings.ContainsAny(key, " \t/") || strings.Count(key, ":") != 1 {
			return yamlfile.Field("overrides."+key, "override key %q must be node:ifname, e.g. s0:eth1", key)
		}
		if err := p.Overrides[key].validateLayer(); err != nil {
			return yamlfile.In("overrides."+key, err)
		}
	}
	return nil
}

// validateLayer checks the fields of one layer that need no link rate.
func (s PortSettings) validateLayer() error {
	if s.Rate != nil && *s.Rate == 0 {
		return yamlfile.Field("rate", "must be positive")
	}
	if s.Queues != nil {
		if _, err := s.Queues.resolve(); err != nil {
			return yamlfile.In("queues", err)
		}
	}
	if s.Marking != nil {
		if err := s.Marking.validate(); err != nil {
			return yamlfile.In("marking", err)
		}
	}
	if s.Buffer != nil && s.Marking != nil && s.Marking.ECN != nil && s.Buffer.Packets == 0 &&
		s.Marking.ECN.Threshold > s.Buffer.Bytes {
		return thresholdTooLarge(s.Marking.ECN.Threshold, *s.Buffer, s.Buffer.Bytes)
	}
	if s.NDP != nil {
		return s.validateNDP()
	}
	return nil
}

func thresholdTooLarge(k units.Size, b Buffer, bytes units.Size) error {
	return yamlfile.Field("marking.ecn.threshold",
		"%s is larger than the buffer (%s = %d bytes): the queue could never reach it", k, b, uint64(bytes))
}

// MaxBands is the number of HTB priorities (0..7), hence of bands.
const MaxBands = 8

func (q *QueuesSpec) resolve() (bands int, err error) {
	switch q.Classify {
	case "", "dscp":
	default:
		return 0, yamlfile.Field("classify", "unknown classifier %q (only dscp)", q.Classify)
	}
	if err := q.checkBuckets(); err != nil {
		return 0, err
	}
	bands = q.Bands
	if len(q.Weights) > 0 {
		if bands == 0 {
			bands = len(q.Weights)
		}
		if len(q.Weights) != bands {
			return 0, yamlfile.Field("weights", "%d weights for %d bands: give one weight per band", len(q.Weights), bands)
		}
		for i, w := range q.Weights {
			if w <= 0 {
				return 0, yamlfile.Field(fmt.Sprintf("weights[%d]", i), "must be a positive integer, got %d", w)
			}
		}
	}
	switch {
	case bands < 0 || (bands == 0 && q.Bands != 0):
		return 0, yamlfile.Field("bands", "must be 1..%d, got %d", MaxBands, q.Bands)
	case bands > MaxBands:
		return 0, yamlfile.Field("bands", "at most %d bands (HTB has priorities 0..7), got %d", MaxBands, bands)
	case bands == 0:
		bands = 1
	}
	return bands, nil
}

func (m *MarkingSpec) validate() error {
	if m.ECN != nil && m.Phantom != nil {
		return yamlfile.Field("", "choose one marker: ecn or phantom, not both")
	}
	if m.ECN != nil && m.ECN.Threshold == 0 {
		return yamlfile.Field("ecn.threshold", "must be positive (e.g. 30KB)")
	}
	if m.Phantom != nil {
		if err := checkDrain(m.Phantom.Drain); err != nil {
			return yamlfile.In("phantom.drain", err)
		}
		if m.Phantom.Threshold == 0 {
			return yamlfile.Field("phantom.threshold", "must be positive (HULL uses 1KB)")
		}
	}
	return nil
}

func checkDrain(d float64) error {
	if !(d > 0 && d <= 1) {
		return yamlfile.Field("", "drain is the fraction of the port rate the phantom queue drains at: want 0 < drain <= 1 (HULL: 0.95), got %v", d)
	}
	return nil
}

func sortedKeys(m map[string]PortSettings) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func quoteList(names []string) string {
	if len(names) == 0 {
		return "no tiers"
	}
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	return strings.Join(q, ", ")
}
