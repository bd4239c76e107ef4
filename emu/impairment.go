package emu

import (
	"strconv"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/fabric-emu/fabric/internal/units"
	"github.com/fabric-emu/fabric/internal/yamlfile"
)

// A link's impairment is what happens to a packet after the sending port's
// queue and before the far end: propagation delay and random loss, set
// per direction. "Up" is from the link's first end to its second: away
// from the hosts in every generated topology (host → edge → aggregation
// → core, host → leaf → spine, s0 → s1 of a dumbbell), and from
// endpoints[0] to endpoints[1] in a custom one.

// Delay is a one-way propagation delay for each direction of a link.
// In a file it is one duration for both ("1ms") or {up: 1ms, down: 2ms};
// a duration must carry its unit. A direction a layer leaves unset keeps
// what the layer below gives it.
type Delay struct {
	Up   *time.Duration `json:"up,omitempty"`
	Down *time.Duration `json:"down,omitempty"`
}

// Loss is the probability, per direction, that the link drops a packet,
// independently of every other: 0.001, or {up: 0.01}.
type Loss struct {
	Up   *float64 `json:"up,omitempty"`
	Down *float64 `json:"down,omitempty"`
}

// UnmarshalYAML accepts a duration or {up, down}.
func (d *Delay) UnmarshalYAML(n *yaml.Node) error {
	return eachDirection(n, func(v *yaml.Node) (any, error) { return parseDelay(v) },
		func(dir string, x any) { d.set(dir, x.(time.Duration)) })
}

// UnmarshalYAML accepts a probability or {up, down}.
func (l *Loss) UnmarshalYAML(n *yaml.Node) error {
	return eachDirection(n, func(v *yaml.Node) (any, error) { return parseLoss(v) },
		func(dir string, x any) { l.set(dir, x.(float64)) })
}

func (d *Delay) set(dir string, v time.Duration) {
	if dir != "down" {
		d.Up = &v
	}
	if dir != "up" {
		d.Down = &v
	}
}

func (l *Loss) set(dir string, v float64) {
	if dir != "down" {
		l.Up = &v
	}
	if dir != "up" {
		l.Down = &v
	}
}

// eachDirection decodes a scalar (both directions, dir "") or a mapping
// of up and down.
func eachDirection(n *yaml.Node, parse func(*yaml.Node) (any, error), set func(dir string, v any)) error {
	if n.Kind == yaml.ScalarNode {
		v, err := parse(n)
		if err != nil {
			return err
		}
		set("", v)
		return nil
	}
	if n.Kind != yaml.MappingNode {
		return yamlfile.LineError(n, "want one value for both directions, or {up: …, down: …}")
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Value != "up" && k.Value != "down" {
			return yamlfile.LineError(k, "unknown direction %q: want up or down", k.Value)
		}
		x, err := parse(v)
		if err != nil {
			return err
		}
		set(k.Value, x)
	}
	return nil
}

// parseDelay reads a non-negative duration that carries its unit ("5"
// could mean seconds or nanoseconds; it is refused).
func parseDelay(n *yaml.Node) (time.Duration, error) {
	if _, err := strconv.ParseFloat(n.Value, 64); err == nil && n.Value != "0" {
		return 0, yamlfile.LineError(n, "%q has no unit: write e.g. 1ms or 250us", n.Value)
	}
	d, err := time.ParseDuration(n.Value)
	if err != nil {
		return 0, yamlfile.LineError(n, "want a duration such as 1ms, got %q", n.Value)
	}
	if d < 0 {
		return 0, yamlfile.LineError(n, "a delay cannot be negative, got %v", d)
	}
	return d, nil
}

// parseLoss reads a probability in [0, 1).
func parseLoss(n *yaml.Node) (float64, error) {
	p, err := strconv.ParseFloat(n.Value, 64)
	if err != nil || !(p >= 0 && p < 1) {
		return 0, yamlfile.LineError(n, "want a probability in [0, 1), got %q", n.Value)
	}
	return p, nil
}

// Impairment is what one direction of a link does to its packets after the
// sending port's queue.
type Impairment struct {
	Delay time.Duration `json:"delay,omitempty"`
	Loss  float64       `json:"loss,omitempty"`
}

// IsZero reports no impairment: no delay, no loss.
func (w Impairment) IsZero() bool { return w == Impairment{} }

// String is "1ms" or "1ms, loss 0.1%".
func (w Impairment) String() string {
	out := w.Delay.String()
	if w.Loss > 0 {
		out += ", loss " + strconv.FormatFloat(100*w.Loss, 'g', 4, 64) + "%"
	}
	return out
}

// impairments resolves the layers of delay and loss (lowest first) into the
// link's two directions.
func impairments(delays []*Delay, losses []*Loss) (up, down Impairment) {
	for _, d := range delays {
		if d != nil {
			up.Delay = deref(d.Up, up.Delay)
			down.Delay = deref(d.Down, down.Delay)
		}
	}
	for _, l := range losses {
		if l != nil {
			up.Loss = deref(l.Up, up.Loss)
			down.Loss = deref(l.Down, down.Loss)
		}
	}
	return up, down
}

func deref[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

// Impairment is what the link does to packets leaving i: the link's up direction
// when i is its first end, down otherwise.
func (i *Iface) Impairment() Impairment {
	if i == i.Link.A {
		return i.Link.Up
	}
	return i.Link.Down
}

// HasDelayLines reports whether any link of g delays or drops packets.
func (g *Graph) HasDelayLines() bool {
	for _, l := range g.Links {
		if !l.Up.IsZero() || !l.Down.IsZero() {
			return true
		}
	}
	return false
}

// Impairments is the part of a links section that an experiment's scheme may
// change: delay and loss, per class. Rates and MTUs stay the lab's, since
// the schedule depends on them.
type Impairments struct {
	Delay  *Delay           `yaml:"delay,omitempty" json:"delay,omitempty"`
	Loss   *Loss            `yaml:"loss,omitempty" json:"loss,omitempty"`
	Host   *ImpairmentLayer `yaml:"host,omitempty" json:"host,omitempty"`
	Fabric *ImpairmentLayer `yaml:"fabric,omitempty" json:"fabric,omitempty"`
}

// ImpairmentLayer is delay and loss for one class of links.
type ImpairmentLayer struct {
	Delay *Delay `yaml:"delay,omitempty" json:"delay,omitempty"`
	Loss  *Loss  `yaml:"loss,omitempty" json:"loss,omitempty"`
}

// WithImpairments returns the spec with w layered over its links: each delay or
// loss that w sets (per class, per direction) replaces the lab's.
func (s Spec) WithImpairments(w Impairments) *Spec {
	l := &s.Links
	l.Delay, l.Loss = overDelay(l.Delay, w.Delay), overLoss(l.Loss, w.Loss)
	if w.Host != nil {
		l.Host.Delay, l.Host.Loss = overDelay(l.Host.Delay, w.Host.Delay), overLoss(l.Host.Loss, w.Host.Loss)
	}
	if w.Fabric != nil {
		l.Fabric.Delay, l.Fabric.Loss = overDelay(l.Fabric.Delay, w.Fabric.Delay), overLoss(l.Fabric.Loss, w.Fabric.Loss)
	}
	s.resolved = nil
	return &s
}

// WithDelay returns the spec with every link delayed by d in each
// direction, whatever its file said: a sweep's delay.
func (s Spec) WithDelay(d time.Duration) *Spec {
	all := &Delay{Up: &d, Down: &d}
	s.Links.Delay, s.Links.Host.Delay, s.Links.Fabric.Delay = all, nil, nil
	return s.withEveryLink(func(cl *CustomLink) { cl.Delay = nil })
}

// withEveryLink is s with clear applied to a copy of each custom link (so
// that the lab-wide setting just made holds on every link) and its
// resolved graph dropped.
func (s Spec) withEveryLink(clear func(*CustomLink)) *Spec {
	links := make([]CustomLink, len(s.Topology.Links))
	for i, cl := range s.Topology.Links {
		clear(&cl)
		links[i] = cl
	}
	s.Topology.Links = links
	s.resolved = nil
	return &s
}

// WithRate returns the spec with every link at rate r, whatever its file
// said: a capacity search's probe (experiments/search). Delays, MTUs and
// ports' byte settings are kept, so only the capacity changes.
func (s Spec) WithRate(r units.Rate) *Spec {
	s.Links.Rate, s.Links.Host.Rate, s.Links.Fabric.Rate = &r, nil, nil
	return s.withEveryLink(func(cl *CustomLink) { cl.Rate = nil })
}

func overDelay(base, top *Delay) *Delay {
	if top == nil {
		return base
	}
	out := Delay{}
	if base != nil {
		out = *base
	}
	out.Up, out.Down = cmpOr(top.Up, out.Up), cmpOr(top.Down, out.Down)
	return &out
}

func overLoss(base, top *Loss) *Loss {
	if top == nil {
		return base
	}
	out := Loss{}
	if base != nil {
		out = *base
	}
	out.Up, out.Down = cmpOr(top.Up, out.Up), cmpOr(top.Down, out.Down)
	return &out
}

// cmpOr is the first non-nil pointer.
func cmpOr[T any](a, b *T) *T {
	if a != nil {
		return a
	}
	return b
}
