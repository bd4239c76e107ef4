package experiments

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/fabric-emu/fabric/emu"
	"github.com/fabric-emu/fabric/hosts/transport"
	"github.com/fabric-emu/fabric/internal/yamlfile"
	"github.com/fabric-emu/fabric/results/report"
	"github.com/fabric-emu/fabric/tc"
)

// ClassSpec is one traffic class of the dynamic pattern (SWP, Zhao et
// al., "SLOs without priorities", §2.1 and §3.2): an independent stream
// of messages with its own sizes, load, arrivals and code point, mixed
// with the other classes into one schedule, and the SLO the report checks
// it against:
//
//	traffic:
//	  pattern: dynamic
//	  client: h0
//	  servers: rest
//	  classes:
//	    fg: {workload: homa_w3_heavy_middle, load: 0.1, arrival: {lognormal_sigma: 2}, dscp: CS7,
//	         slo: {p99_slowdown: 2.5, below: 1bdp}}
//	    bg: {workload: homa_w3_heavy_middle, share: 1, arrival: {lognormal_sigma: 2}}
//	sweep: {scheme: all, load: [0.2, 0.5, 0.8]}
//
// A class offers either a fixed Load (a fraction of the receiver's link)
// or a Share of the point's load (traffic.load or the swept load), so one
// class can stay put while another is swept.
type ClassSpec struct {
	Workload string  `yaml:"workload" json:"workload"`
	Share    float64 `yaml:"share,omitempty" json:"share,omitempty"`
	Load     float64 `yaml:"load,omitempty" json:"load,omitempty"`
	// Arrival is the class's inter-arrival law: Poisson unless
	// lognormal_sigma is set.
	Arrival Arrival `yaml:"arrival,omitempty" json:"arrival,omitempty"`
	// DSCP is the code point of the class's packets (a name such as CS7
	// or AF11, or 0..63); ports classify by it (tc.Port.BandOf).
	DSCP transport.DSCP `yaml:"dscp,omitempty" json:"dscp,omitempty"`
	SLO  report.SLO     `yaml:"slo,omitempty" json:"slo,omitempty"`
}

// maxClasses is how many classes a schedule can name (schedMsg.class).
const maxClasses = math.MaxUint8 + 1

// classLoad is the fraction of the receiver's link class c offers at p.
// At a capacity search's probe (p.Rate set) the class keeps the bits per
// second it offers at the lab's own rate, so its fraction of the probed
// link scales by the lab's rate over the probe's.
func (s *Spec) classLoad(c ClassSpec, p Point) float64 {
	load := c.Load
	if load == 0 {
		load = c.Share * p.Load
	}
	if p.Rate > 0 {
		load *= s.labRateBPS() / float64(p.Rate)
	}
	return load
}

// labRateBPS is the rate of the first client's link as the lab file gives
// it: what class loads are fractions of.
func (s *Spec) labRateBPS() float64 {
	if c := s.clients(); len(c) > 0 {
		if n := s.graph.Node(c[0]); n != nil && len(n.Ifaces) > 0 {
			return float64(n.Ifaces[0].Link.Rate)
		}
	}
	return 0
}

// schemeAt is point p's scheme: the file's, with a search probe's weights
// in place of its ports' queues.weights.
func (s *Spec) schemeAt(p Point) Scheme {
	sc := s.Schemes[p.Scheme]
	if len(p.Weights) > 0 && sc.Ports.Queues != nil {
		q := *sc.Ports.Queues
		q.Weights = p.Weights
		sc.Ports.Queues = &q
	}
	return sc
}

// OfferedLoad is the fraction of the receiver's link the dynamic traffic
// offers at p: the point's load, or with classes their loads together.
func (s *Spec) OfferedLoad(p Point) float64 {
	if len(s.Traffic.Classes) == 0 {
		return p.Load
	}
	total := 0.0
	for _, name := range s.ClassOrder {
		total += s.classLoad(s.Traffic.Classes[name], p)
	}
	return total
}

// ClassMetas are the classes as meta.json records them for point p.
func (s *Spec) ClassMetas(p Point) []report.ClassMeta {
	var out []report.ClassMeta
	for _, name := range s.ClassOrder {
		c := s.Traffic.Classes[name]
		out = append(out, report.ClassMeta{Name: name, DSCP: uint8(c.DSCP), Load: s.classLoad(c, p), SLO: c.SLO})
	}
	return out
}

// classSchedule is the schedule's streams when the traffic has classes.
func (s *Spec) classSchedule(p Point) []scheduleClass {
	var out []scheduleClass
	for _, name := range s.ClassOrder {
		c := s.Traffic.Classes[name]
		out = append(out, scheduleClass{name: name, cdf: s.cdfs[c.Workload], load: s.classLoad(c, p),
			arrival: c.Arrival, dscp: uint8(c.DSCP)})
	}
	return out
}

// validateClasses checks traffic.classes (paths relative to traffic).
func (s *Spec) validateClasses() error {
	t := &s.Traffic
	f := yamlfile.Field
	switch {
	case t.Workload != "":
		return f("workload", "with classes, each class names its workload")
	case t.Arrival != Arrival{}:
		return f("arrival", "with classes, each class gives its arrival law")
	case len(s.Sweep.Workload) > 0:
		return f("classes", "sweep.workload varies the one workload of traffic without classes; each class names its own")
	case len(t.Classes) > maxClasses:
		return f("classes", "at most %d classes, got %d", maxClasses, len(t.Classes))
	}
	shares := 0.0
	for _, name := range s.ClassOrder {
		if !validName(name) {
			return f("classes."+name, "class names label records and tables: use letters, digits, '-', '_' or '.', got %q", name)
		}
		if err := yamlfile.In("classes."+name, s.validateClass(t.Classes[name])); err != nil {
			return err
		}
		shares += t.Classes[name].Share
	}
	if shares > 1+1e-9 {
		return f("classes", "the classes' shares sum to %g; a share is a fraction of the point's load, so they may sum to at most 1", shares)
	}
	if shares > 0 && t.Load == 0 && len(s.Sweep.Load) == 0 {
		return f("load", "classes with a share need a load to share (traffic.load or sweep.load)")
	}
	return s.checkOffered()
}

// validateClass checks one class (paths relative to the class).
func (s *Spec) validateClass(c ClassSpec) error {
	f := yamlfile.Field
	if c.Workload == "" {
		return f("workload", "each class needs a flow-size workload (e.g. homa_w3_heavy_middle)")
	}
	if err := s.openWorkload("workload", c.Workload); err != nil {
		return err
	}
	switch {
	case c.Share != 0 && c.Load != 0:
		return f("share", "give a share of the point's load or a fixed load, not both")
	case c.Share == 0 && c.Load == 0:
		return f("share", "want a share of the point's load (0, 1] or a fixed load (0, 1) of the link")
	case c.Share < 0 || c.Share > 1:
		return f("share", "want a fraction of the point's load in (0, 1], got %v", c.Share)
	case c.Load < 0 || c.Load >= 1:
		return f("load", "want a fraction of the link rate in (0, 1), got %v", c.Load)
	case c.Arrival.LogNormalSigma < 0:
		return f("arrival.lognormal_sigma", "want a shape σ ≥ 0 (0: Poisson), got %v", c.Arrival.LogNormalSigma)
	}
	for i, o := range c.SLO {
		if field, problem := o.Check(); problem != "" {
			path := fmt.Sprintf("slo[%d]", i)
			if len(c.SLO) == 1 {
				path = "slo" // written as a mapping, or a list of one: the line is the same
			}
			if field != "" {
				path += "." + field
			}
			return f(path, "%s", problem)
		}
	}
	return nil
}

// checkOffered checks that the classes together offer less than the link
// at every load the sweeps (full and quick) reach.
func (s *Spec) checkOffered() error {
	loads := orOne(s.Sweep.Load, s.Traffic.Load)
	if q := s.Quick; q != nil && q.Sweep != nil {
		loads = append(loads, q.Sweep.Load...)
	}
	for _, l := range loads {
		if total := s.OfferedLoad(Point{Load: l}); total >= 1 {
			return yamlfile.Field("classes", "at load %g the classes offer %.3g of the link; want less than 1", l, total)
		}
	}
	return nil
}

// validateClassWeights checks every scheme's weighted ports against the
// classes: a weight is a band's share, and a band serves the classes whose
// DSCP maps to it (tc.Port.BandOf), so a weight for a band no class uses,
// or more weights than classes, is a mistake in the file.
func (s *Spec) validateClassWeights() error {
	if len(s.Traffic.Classes) == 0 {
		return nil
	}
	for _, name := range s.SchemeOrder {
		sc := s.Schemes[name]
		path := "schemes." + name + ".ports"
		if q := sc.Ports.Queues; q != nil && len(q.Weights) > 0 {
			path += ".queues.weights"
		}
		if err := s.checkSchemeWeights(sc, path); err != nil {
			return err
		}
	}
	return nil
}

// checkSchemeWeights checks every weighted switch port of scheme sc
// against the classes; path is where the weights were written.
func (s *Spec) checkSchemeWeights(sc Scheme, path string) error {
	merged := s.labFor(sc, Point{}, s.LabSpec.Name)
	for _, sw := range s.graph.Switches() {
		for _, i := range sw.Ifaces {
			port, err := merged.Port(i)
			if err != nil || len(port.Weights) == 0 {
				continue // Port errors were reported by validateScheme
			}
			if err := s.checkWeights(path, port, i); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkWeights checks one weighted port against the classes; path is
// where its weights were written.
func (s *Spec) checkWeights(path string, port tc.Port, i *emu.Iface) error {
	used := map[int][]string{}
	var desc []string
	for _, c := range s.ClassOrder {
		d := s.Traffic.Classes[c].DSCP
		b := int(port.BandOf[d>>3])
		used[b] = append(used[b], c)
		desc = append(desc, fmt.Sprintf("%s %v → band %d", c, d, b))
	}
	where := fmt.Sprintf("(port %s; classes: %s; a class's band follows its DSCP's class selector, CS7 first)", i.Label(), strings.Join(desc, ", "))
	if len(port.Weights) > len(s.ClassOrder) {
		return yamlfile.Field(path, "%d weights for %d traffic classes: a weight is a class's share %s",
			len(port.Weights), len(s.ClassOrder), where)
	}
	for b := range port.Weights {
		if len(used[b]) == 0 {
			p := path
			if strings.HasSuffix(p, ".weights") {
				p = fmt.Sprintf("%s[%d]", p, b)
			}
			return yamlfile.Field(p, "weight for band %d, which no traffic class uses %s", b, where)
		}
	}
	return nil
}

// mappingKeysAt lists the keys of the mapping at the path of keys from
// root, in file order.
func mappingKeysAt(root *yaml.Node, keys ...string) []string {
	n := root
	for _, k := range keys {
		var next *yaml.Node
		for i := 0; n != nil && n.Kind == yaml.MappingNode && i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == k {
				next = n.Content[i+1]
			}
		}
		n = next
	}
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	var out []string
	for j := 0; j+1 < len(n.Content); j += 2 {
		out = append(out, n.Content[j].Value)
	}
	return slices.Clip(out)
}
