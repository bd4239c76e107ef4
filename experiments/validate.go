package experiments

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/fabric-emu/fabric/emu"
	"github.com/fabric-emu/fabric/experiments/paper"
	"github.com/fabric-emu/fabric/hosts"
	"github.com/fabric-emu/fabric/hosts/cc"
	"github.com/fabric-emu/fabric/hosts/workload"
	"github.com/fabric-emu/fabric/internal/yamlfile"
)

// Patterns the traffic section accepts.
var trafficPatterns = []string{"dynamic", "incast", "static", "permutation", "priority", "poisson"}

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
	if err := s.validateClassWeights(); err != nil {
		return err
	}
	if err := s.validateSearches(); err != nil {
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
	if s.Reruns < 0 {
		return f("reruns", "want 0 or more, got %d", s.Reruns)
	}
	if err := s.validateQuick(); err != nil {
		return err
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
	if err := sc.Transport.validate(path+".transport", !hosts.IsNetNS(s.LabSpec.Hosts.Runtime)); err != nil {
		return err
	}
	if s.Traffic.Pattern == "poisson" && sc.Transport.IsTCP() {
		return yamlfile.Field(path+".transport", "the poisson pattern's packets are datagrams: use transport: udp (or a datagram transport of your own)")
	}
	if sc.CC == "" && sc.Transport.IsTCP() {
		return yamlfile.Field(path+".cc", "is required for the tcp transport (one of %s)", strings.Join(cc.Names, ", "))
	}
	if sc.CC != "" && !cc.Known(sc.CC) {
		return yamlfile.Field(path+".cc", "unknown congestion control %q (want one of %s)", sc.CC, strings.Join(cc.Names, ", "))
	}
	if err := sc.Ports.Validate(s.graph.Tiers); err != nil {
		return yamlfile.In(path+".ports", err)
	}
	// The merged lab must still resolve (a threshold above the lab's
	// buffer, a rate of zero...): check it now, before anything is built.
	merged := s.labFor(sc, Point{}, s.LabSpec.Name)
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

// host checks that name is a host of the lab.
func (s *Spec) host(path, name string) error {
	n := s.graph.Node(name)
	if n == nil || n.Kind != emu.HostNode {
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
	if len(t.Classes) > 0 && t.Pattern != "dynamic" {
		return f("classes", "only the dynamic pattern has traffic classes, not %s", t.Pattern)
	}
	if err := s.validateEnds(); err != nil {
		return err
	}
	if t.Load != 0 && !(t.Load > 0 && t.Load < 1) {
		return f("load", "want a fraction of the link rate in (0, 1), got %v", t.Load)
	}
	return s.validatePattern()
}

// validateEnds checks the client and server lists: every name is a host,
// "all" and "rest" stand alone, and patterns other than permutation name
// both ends.
func (s *Spec) validateEnds() error {
	t := &s.Traffic
	f := yamlfile.Field
	for _, l := range []struct {
		path string
		list HostList
	}{{"client", t.Client}, {"servers", t.Servers}} {
		for i, h := range l.list {
			if h != "all" && h != "rest" {
				if err := s.host(l.path, h); err != nil {
					return err
				}
			} else if len(l.list) > 1 {
				return f(fmt.Sprintf("%s[%d]", l.path, i), "%q stands alone, not in a list", h)
			}
		}
	}
	if t.Pattern == "permutation" {
		return nil
	}
	switch {
	case len(t.Client) == 0:
		return f("client", "pattern %s needs a client host", t.Pattern)
	case len(t.Servers) == 0:
		return f("servers", "pattern %s needs servers (host names, all or rest)", t.Pattern)
	case len(s.clients()) == 0:
		return f("client", "names no host")
	case len(s.servers()) == 0:
		return f("servers", "names no host")
	}
	return nil
}

// openWorkload opens a workload the spec names (none when ref is empty)
// and keeps it for the schedule.
func (s *Spec) openWorkload(field, ref string) error {
	if ref == "" || s.cdfs[ref] != nil {
		return nil
	}
	cdf, err := workload.Open(ref, nil)
	if err != nil {
		return yamlfile.Field(field, "%v", err)
	}
	if s.cdfs == nil {
		s.cdfs = map[string]*workload.CDF{}
	}
	s.cdfs[ref] = cdf
	return nil
}

// validatePattern checks the fields each pattern needs.
func (s *Spec) validatePattern() error {
	t := &s.Traffic
	f := yamlfile.Field
	switch t.Pattern {
	case "dynamic":
		if t.Conns < 0 {
			return f("conns", "want at least 1, got %d", t.Conns)
		}
		if len(t.Classes) > 0 {
			return s.validateClasses()
		}
		if t.Workload == "" && len(s.Sweep.Workload) == 0 {
			return f("workload", "the dynamic pattern needs a flow-size workload (e.g. hull_1k_10m, here or in sweep.workload)")
		}
		if err := s.openWorkload("workload", t.Workload); err != nil {
			return err
		}
		if t.Load == 0 && len(s.Sweep.Load) == 0 {
			return f("load", "the dynamic pattern needs a load (here or in sweep.load)")
		}
	case "incast":
		if t.Size == 0 && len(s.Sweep.Size) == 0 {
			return f("size", "the incast pattern needs the response size S, e.g. 64KB")
		}
		if t.Senders < 0 || t.Senders > len(s.servers()) {
			return f("senders", "want 1..%d (the servers listed), got %d", len(s.servers()), t.Senders)
		}
	case "priority":
		return s.validatePriority()
	case "poisson":
		return s.validatePoisson()
	case "static", "permutation":
		if t.Flows < 0 {
			return f("flows", "want at least 1, got %d", t.Flows)
		}
		if t.Pattern == "static" && (t.Senders < 0 || t.Senders > len(s.clients())) {
			return f("senders", "want 1..%d (the clients listed), got %d", len(s.clients()), t.Senders)
		}
		if t.Pattern == "permutation" && len(s.graph.Hosts()) < 2 {
			return f("pattern", "permutation needs at least 2 hosts")
		}
	}
	return nil
}

// validatePriority checks the priority pattern: a short message size, a
// long one, and at most as many long flows as servers after the first
// (the short message's sender).
func (s *Spec) validatePriority() error {
	t := &s.Traffic
	f := yamlfile.Field
	switch {
	case t.Size == 0:
		return f("size", "the priority pattern needs the short message's size, e.g. 200KB")
	case t.LongSize == 0:
		return f("long_size", "the priority pattern needs the long messages' size, e.g. 1MB")
	case t.Senders < 0 || t.Senders > len(s.servers())-1:
		return f("senders", "want 0..%d long flows (the servers after the first, which sends the short message), got %d", len(s.servers())-1, t.Senders)
	}
	return nil
}

// sweepable says which traffic fields a sweep key varies, for which
// patterns.
var sweepable = map[string][]string{
	"load":     {"dynamic", "poisson"},
	"senders":  {"incast", "static", "priority"},
	"flows":    {"static", "permutation"},
	"size":     {"incast", "poisson"},
	"delay":    {"dynamic", "incast", "static", "permutation", "priority", "poisson"},
	"workload": {"dynamic"},
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
	used := map[string]int{"load": len(w.Load), "senders": len(w.Senders), "flows": len(w.Flows), "size": len(w.Size),
		"delay": len(w.Delay), "workload": len(w.Workload)}
	for _, key := range []string{"load", "senders", "flows", "size", "workload"} {
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
	least, limit := 1, len(s.servers())
	switch s.Traffic.Pattern {
	case "static":
		limit = len(s.clients())
	case "priority":
		least, limit = 0, limit-1 // 0: the short message alone
	}
	for i, n := range w.Senders {
		if n < least || n > limit {
			return f(fmt.Sprintf("senders[%d]", i), "want %d..%d, got %d", least, limit, n)
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
	for i, ref := range w.Workload {
		if err := s.openWorkload(fmt.Sprintf("workload[%d]", i), ref); err != nil {
			return err
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
		if sw == nil || sw.Kind != emu.SwitchNode {
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
	if q := s.Measure.Queue; q != nil {
		if err := q.validate(); err != nil {
			return err
		}
	}
	if p := s.Measure.Probe; p != nil {
		if err := s.host("probe.from", p.From); err != nil {
			return err
		}
		if err := s.host("probe.to", p.To); err != nil {
			return err
		}
		if p.Interval < 0 {
			return yamlfile.Field("probe.interval", "must be positive, not %v", p.Interval)
		}
	}
	return nil
}

// validateQuick checks the quick variant's overrides.
func (s *Spec) validateQuick() error {
	f := yamlfile.Field
	q := s.Quick
	if q == nil {
		return nil
	}
	if q.Scale != nil && !s.Scale.PaperScale() {
		return f("quick.scale", "a quick variant's s scales a file written at the paper's rates and times (scale: auto "+
			"or a number); this one is written at the emulation's")
	}
	if q.Duration < 0 {
		return f("quick.duration", "want a positive duration, got %v", q.Duration)
	}
	if q.Trials < 0 {
		return f("quick.trials", "want at least 1, got %d", q.Trials)
	}
	if q.Reruns < 0 {
		return f("quick.reruns", "want 0 or more, got %d", q.Reruns)
	}
	if q.Sweep != nil {
		if err := yamlfile.In("quick.sweep", s.validateSweep(*q.Sweep)); err != nil {
			return err
		}
	}
	return nil
}
