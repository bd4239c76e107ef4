package emu

import (
	"encoding/json"
	"fmt"
	"net/netip"

	"github.com/fabric-emu/fabric/internal/yamlfile"
)

// Resolve builds the Graph for the spec: generator, addressing, routing.
// Errors are yamlfile.FieldErrors relative to the spec. A spec is resolved
// once: loading it (Validate) resolves it, and later calls (Up, NeedsAgent,
// a tool's summary) reuse that graph for as long as the spec is unchanged.
// The graph is read-only; a Lab shares it.
func (s *Spec) Resolve() (*Graph, error) {
	key, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	if s.resolved != nil && s.resolved.key == string(key) {
		return s.resolved.graph, nil
	}
	g, err := s.resolve()
	if err != nil {
		return nil, err
	}
	s.resolved = &resolution{key: string(key), graph: g}
	return g, nil
}

// resolution is a Graph and the spec it was resolved from, as JSON: the
// spec is a plain struct that programs may change (the builder methods,
// experiments merging a scheme's ports), and comparing what it says is
// the one check that cannot miss a change.
type resolution struct {
	key   string
	graph *Graph
}

func (s *Spec) resolve() (*Graph, error) {
	b := &builder{g: &Graph{Lab: s.Name, byName: map[string]*Node{}}, links: s.Links}
	var err error
	switch s.Topology.Kind {
	case KindFatTree:
		err = b.fatTree(s.Topology.K)
	case KindLeafSpine:
		err = b.leafSpine(s.Topology)
	case KindStar:
		err = b.star(s.Topology.Hosts)
	case KindDumbbell:
		err = b.dumbbell(s.Topology.Left, s.Topology.Right)
	case KindCustom:
		err = b.custom(s.Topology)
	case "":
		return nil, yamlfile.Field("topology.kind", "is required: one of fattree, leafspine, star, dumbbell, custom")
	default:
		return nil, yamlfile.Field("topology.kind", "unknown kind %q: want fattree, leafspine, star, dumbbell or custom", s.Topology.Kind)
	}
	if err != nil {
		return nil, err
	}
	g := b.g
	if len(g.Nodes) > maxNodes {
		return nil, yamlfile.Field("topology", "%d nodes is more than this tool builds (%d)", len(g.Nodes), maxNodes)
	}
	sortHostsFirst(g)
	if err := b.address(s.Topology.Kind == KindFatTree); err != nil {
		return nil, err
	}
	route(g)
	if err := s.Ports.Validate(g.Tiers); err != nil {
		return nil, yamlfile.In("ports", err)
	}
	if err := s.validateHosts(g); err != nil {
		return nil, err
	}
	return g, nil
}

// builder accumulates nodes and links for the generators.
type builder struct {
	g     *Graph
	links LinkClasses
	// hostAddr, when set by a generator, fixes a host's address (Al-Fares
	// scheme for fat trees, explicit addresses in custom topologies).
	hostAddr map[*Node]netip.Prefix
}

func (b *builder) node(name string, kind NodeKind, tier string) *Node {
	n := &Node{Name: name, Kind: kind, Tier: tier}
	b.g.Nodes = append(b.g.Nodes, n)
	b.g.byName[name] = n
	return n
}

// link connects a and c; empty interface names take the next ethN.
func (b *builder) link(a *Node, aIf string, c *Node, cIf string, own *CustomLink) *Link {
	class := FabricLink
	if a.Kind == HostNode || c.Kind == HostNode {
		class = HostLink
	}
	l := &Link{Index: len(b.g.Links), Class: class}
	if own == nil {
		own = &CustomLink{}
	}
	b.linkSettings(l, own)
	l.A = &Iface{Node: a, Name: ifName(a, aIf), Link: l}
	l.B = &Iface{Node: c, Name: ifName(c, cIf), Link: l}
	l.A.Peer, l.B.Peer = l.B, l.A
	a.Ifaces = append(a.Ifaces, l.A)
	c.Ifaces = append(c.Ifaces, l.B)
	b.g.Links = append(b.g.Links, l)
	return l
}

func ifName(n *Node, given string) string {
	if given != "" {
		return given
	}
	return fmt.Sprintf("eth%d", len(n.Ifaces))
}

// linkSettings applies the precedence: the link's own value, then the
// class default (links.host / links.fabric), then links.*, then built-in.
func (b *builder) linkSettings(l *Link, own *CustomLink) {
	cls := b.links.Fabric
	if l.Class == HostLink {
		cls = b.links.Host
	}
	l.Rate = *last(ptr(DefaultRate), b.links.Rate, cls.Rate, own.Rate)
	l.MTU = *last(ptr(DefaultMTU), nonZero(b.links.MTU), nonZero(cls.MTU), nonZero(own.MTU))
	l.Offloads = *last(ptr(false), b.links.Offloads, cls.Offloads)
	l.Up, l.Down = impairments([]*Delay{b.links.Delay, cls.Delay, own.Delay}, []*Loss{b.links.Loss, cls.Loss, own.Loss})
}

// last returns the last non-nil value.
func last[T any](vs ...*T) *T {
	var out *T
	for _, v := range vs {
		if v != nil {
			out = v
		}
	}
	return out
}

func ptr[T any](v T) *T { return &v }

// nonZero is nil for 0, so that an unset int does not override.
func nonZero(v int) *int {
	if v == 0 {
		return nil
	}
	return &v
}
