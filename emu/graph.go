package emu

import (
	"fmt"
	"net"
	"net/netip"
	"sort"
	"strings"

	"fabric/internal/units"
	"fabric/internal/yamlfile"
)

// NodeKind tells hosts from switches.
type NodeKind string

const (
	Host   NodeKind = "host"
	Switch NodeKind = "switch"
)

// LinkClass is what a link connects, for the per-class link defaults.
type LinkClass string

const (
	HostLink   LinkClass = "host"   // a host and its switch
	FabricLink LinkClass = "fabric" // two switches
)

// Graph is a resolved topology: every node, interface, address and route,
// computed without touching the kernel. Up turns it into namespaces.
type Graph struct {
	Lab   string
	Nodes []*Node // hosts first, then switches, each in generator order
	Links []*Link
	Tiers []string // the switch tiers this topology has (for ports.tiers)

	byName map[string]*Node
}

// Node is a host or a switch.
type Node struct {
	Name   string
	Kind   NodeKind
	Tier   string // edge/agg/core, leaf/spine, tor, or a custom tier; "host" for hosts
	Ifaces []*Iface
	Routes []Route // switches: routes to every host prefix they do not own

	// Hosts only.
	Addr    netip.Addr // the host's IPv4 address (/32 on its interface)
	Gateway netip.Addr // its switch's address on the link
	// Switches with hosts: the prefixes other switches route towards it.
	prefixes []netip.Prefix
}

// Iface is one end of a link. Every link is numbered point to point: the
// interface has Local/32 with PeerAddr as its peer, which gives a
// connected route to the peer without any subnet on the wire.
type Iface struct {
	Node     *Node
	Name     string
	Peer     *Iface
	Link     *Link
	Local    netip.Addr
	PeerAddr netip.Addr
}

// MAC is the interface's hardware address, fixed by the link's index and
// side (locally administered, 02:fb:…). Knowing every address in advance
// lets Up install permanent neighbour entries: the kernel's ARP table is
// shared by all namespaces and holds 1024 dynamic entries by default
// (gc_thresh3), which a k=16 fat tree alone would overflow; permanent
// entries do not count against it, and no ARP packets reach captures.
func (i *Iface) MAC() net.HardwareAddr {
	side := byte(0)
	if i.Link.B == i {
		side = 1
	}
	n := i.Link.Index
	return net.HardwareAddr{0x02, 0xfb, byte(n >> 16), byte(n >> 8), byte(n), side}
}

// Label is "node:ifname", the way ports are named everywhere.
func (i *Iface) Label() string { return i.Node.Name + ":" + i.Name }

// Link is a veth pair.
type Link struct {
	Index    int
	A, B     *Iface
	Class    LinkClass
	Rate     units.Rate
	MTU      int
	Offloads bool
}

// Route sends Dst over one or more equal-cost interfaces; the gateway of
// each next hop is that interface's PeerAddr.
type Route struct {
	Dst      netip.Prefix
	NextHops []*Iface
}

// Node returns the node called name, or nil.
func (g *Graph) Node(name string) *Node { return g.byName[name] }

// Hosts returns the hosts in order.
func (g *Graph) Hosts() []*Node { return g.filter(Host) }

// Switches returns the switches in order.
func (g *Graph) Switches() []*Node { return g.filter(Switch) }

func (g *Graph) filter(k NodeKind) []*Node {
	var out []*Node
	for _, n := range g.Nodes {
		if n.Kind == k {
			out = append(out, n)
		}
	}
	return out
}

// Iface returns the interface called name on n, or nil.
func (n *Node) Iface(name string) *Iface {
	for _, i := range n.Ifaces {
		if i.Name == name {
			return i
		}
	}
	return nil
}

// Limits that keep a lab within what one machine and the address plan hold.
const (
	maxNodes       = 10000
	maxIfName      = 15 // IFNAMSIZ-1
	maxHostsPerSw  = 253
	fabricNetFirst = 10  // fabric links are numbered from 10.255.0.0/16
	fabricNetOctet = 255 //
)

// Resolve builds the Graph for the spec: generator, addressing, routing.
// Errors are yamlfile.FieldErrors relative to the spec.
func (s *Spec) Resolve() (*Graph, error) {
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
	links LinksSpec
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
func (b *builder) link(a *Node, aIf string, c *Node, cIf string, rate *units.Rate, mtu int) *Link {
	class := FabricLink
	if a.Kind == Host || c.Kind == Host {
		class = HostLink
	}
	l := &Link{Index: len(b.g.Links), Class: class}
	l.Rate, l.MTU, l.Offloads = b.linkSettings(class, rate, mtu)
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
func (b *builder) linkSettings(class LinkClass, rate *units.Rate, mtu int) (units.Rate, int, bool) {
	cls := b.links.Fabric
	if class == HostLink {
		cls = b.links.Host
	}
	r := DefaultRate
	for _, v := range []*units.Rate{b.links.Rate, cls.Rate, rate} {
		if v != nil {
			r = *v
		}
	}
	m := DefaultMTU
	for _, v := range []int{b.links.MTU, cls.MTU, mtu} {
		if v != 0 {
			m = v
		}
	}
	off := false
	for _, v := range []*bool{b.links.Offloads, cls.Offloads} {
		if v != nil {
			off = *v
		}
	}
	return r, m, off
}

// fatTree is the three-tier Al-Fares layout ("A Scalable, Commodity Data
// Center Network Architecture", SIGCOMM 2008, §3): k pods of k/2 edge and
// k/2 aggregation switches, (k/2)² cores, k³/4 hosts. Aggregation switch a
// of every pod connects to cores a·k/2 … a·k/2+k/2−1.
func (b *builder) fatTree(k int) error {
	switch {
	case k == 0:
		return yamlfile.Field("topology.k", "is required for a fattree (an even number ≥ 4)")
	case k < 4 || k%2 != 0:
		return yamlfile.Field("topology.k", "must be even and ≥ 4, got %d", k)
	case k > 32:
		return yamlfile.Field("topology.k", "%d is too large for one machine (max 32)", k)
	}
	half := k / 2
	b.g.Tiers = []string{"edge", "agg", "core"}
	b.hostAddr = map[*Node]netip.Prefix{}
	edges := make([][]*Node, k)
	aggs := make([][]*Node, k)
	host := 0
	for p := 0; p < k; p++ {
		for e := 0; e < half; e++ {
			edges[p] = append(edges[p], b.node(fmt.Sprintf("p%de%d", p, e), Switch, "edge"))
		}
		for a := 0; a < half; a++ {
			aggs[p] = append(aggs[p], b.node(fmt.Sprintf("p%da%d", p, a), Switch, "agg"))
		}
		for e := 0; e < half; e++ {
			for i := 0; i < half; i++ {
				h := b.node(fmt.Sprintf("h%d", host), Host, "host")
				host++
				b.link(h, "", edges[p][e], "", nil, 0)
				// Al-Fares §3.2: host addresses are 10.pod.switch.ID, ID in [2, k/2+1].
				b.hostAddr[h] = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(p), byte(e), byte(i + 2)}), 24)
			}
		}
		for e := 0; e < half; e++ {
			for a := 0; a < half; a++ {
				b.link(edges[p][e], "", aggs[p][a], "", nil, 0)
			}
		}
	}
	for c := 0; c < half*half; c++ {
		core := b.node(fmt.Sprintf("c%d", c), Switch, "core")
		for p := 0; p < k; p++ {
			b.link(aggs[p][c/half], "", core, "", nil, 0)
		}
	}
	return nil
}

// leafSpine connects every leaf to every spine.
func (b *builder) leafSpine(t TopologySpec) error {
	for _, f := range []struct {
		name string
		v    int
	}{{"leaves", t.Leaves}, {"spines", t.Spines}, {"hosts_per_leaf", t.HostsPerLeaf}} {
		if f.v < 1 {
			return yamlfile.Field("topology."+f.name, "must be ≥ 1 for a leafspine, got %d", f.v)
		}
	}
	if t.HostsPerLeaf > maxHostsPerSw {
		return yamlfile.Field("topology.hosts_per_leaf", "at most %d", maxHostsPerSw)
	}
	b.g.Tiers = []string{"leaf", "spine"}
	var leaves []*Node
	host := 0
	for l := 0; l < t.Leaves; l++ {
		leaf := b.node(fmt.Sprintf("l%d", l), Switch, "leaf")
		leaves = append(leaves, leaf)
		for i := 0; i < t.HostsPerLeaf; i++ {
			h := b.node(fmt.Sprintf("h%d", host), Host, "host")
			host++
			b.link(h, "", leaf, "", nil, 0)
		}
	}
	for s := 0; s < t.Spines; s++ {
		spine := b.node(fmt.Sprintf("s%d", s), Switch, "spine")
		for _, leaf := range leaves {
			b.link(leaf, "", spine, "", nil, 0)
		}
	}
	return nil
}

// star is one switch s0 with hosts h0…hN-1, host i on s0:eth<i>: the HULL
// testbed shape (§5: one switch, 10 servers).
func (b *builder) star(n int) error {
	if n < 2 || n > maxHostsPerSw {
		return yamlfile.Field("topology.hosts", "a star needs 2-%d hosts, got %d", maxHostsPerSw, n)
	}
	b.g.Tiers = []string{"tor"}
	sw := b.node("s0", Switch, "tor")
	for i := 0; i < n; i++ {
		b.link(b.node(fmt.Sprintf("h%d", i), Host, "host"), "", sw, "", nil, 0)
	}
	return nil
}

// dumbbell is two switches joined by one bottleneck link (s0:eth<left> –
// s1:eth<right>), with hosts h0…h<left-1> on s0 and the rest on s1.
func (b *builder) dumbbell(left, right int) error {
	if left < 1 || left > maxHostsPerSw {
		return yamlfile.Field("topology.left", "a dumbbell needs 1-%d hosts on the left, got %d", maxHostsPerSw, left)
	}
	if right < 1 || right > maxHostsPerSw {
		return yamlfile.Field("topology.right", "a dumbbell needs 1-%d hosts on the right, got %d", maxHostsPerSw, right)
	}
	b.g.Tiers = []string{"tor"}
	s0, s1 := b.node("s0", Switch, "tor"), b.node("s1", Switch, "tor")
	for i := 0; i < left+right; i++ {
		sw := s0
		if i >= left {
			sw = s1
		}
		b.link(b.node(fmt.Sprintf("h%d", i), Host, "host"), "", sw, "", nil, 0)
	}
	b.link(s0, "", s1, "", nil, 0)
	return nil
}

// custom builds explicit nodes and links. Nodes are created in name order
// so that the result does not depend on YAML map order.
func (b *builder) custom(t TopologySpec) error {
	if len(t.Nodes) == 0 {
		return yamlfile.Field("topology.nodes", "a custom topology needs nodes")
	}
	tiers := map[string]bool{}
	b.hostAddr = map[*Node]netip.Prefix{}
	for _, name := range sortedKeys(t.Nodes) {
		ns := t.Nodes[name]
		path := "topology.nodes." + name
		if !nodeNameRE.MatchString(name) || len(name) > 32 {
			return yamlfile.Field(path, "node name %q must be 1-32 characters of letters, digits, '_' and '-'", name)
		}
		switch ns.Kind {
		case "host":
			if ns.Tier != "" {
				return yamlfile.Field(path+".tier", "only switches have a tier")
			}
			n := b.node(name, Host, "host")
			if ns.Address != "" {
				p, err := netip.ParsePrefix(ns.Address)
				if err != nil || !p.Addr().Is4() || p.Bits() > 30 || p.Bits() < 8 {
					return yamlfile.Field(path+".address", "%q: want an IPv4 address with its subnet, e.g. 10.9.0.2/24", ns.Address)
				}
				b.hostAddr[n] = p
			}
		case "switch":
			if ns.Address != "" {
				return yamlfile.Field(path+".address", "switch addresses are assigned per link; only hosts take an address")
			}
			tier := ns.Tier
			if tier == "" {
				tier = "switch"
			}
			tiers[tier] = true
			b.node(name, Switch, tier)
		case "":
			return yamlfile.Field(path+".kind", "is required: host or switch")
		default:
			return yamlfile.Field(path+".kind", "unknown kind %q: want host or switch", ns.Kind)
		}
	}
	for t := range tiers {
		b.g.Tiers = append(b.g.Tiers, t)
	}
	sort.Strings(b.g.Tiers)
	if len(t.Links) == 0 {
		return yamlfile.Field("topology.links", "a custom topology needs links")
	}
	for i, ls := range t.Links {
		path := fmt.Sprintf("topology.links[%d]", i)
		if len(ls.Endpoints) != 2 {
			return yamlfile.Field(path+".endpoints", "want exactly two endpoints \"node:ifname\", got %d", len(ls.Endpoints))
		}
		var ends [2]*Node
		var names [2]string
		for j, ep := range ls.Endpoints {
			epPath := fmt.Sprintf("%s.endpoints[%d]", path, j)
			node, ifn, ok := strings.Cut(ep, ":")
			if !ok || node == "" || ifn == "" {
				return yamlfile.Field(epPath, "%q: want \"node:ifname\"", ep)
			}
			n := b.g.byName[node]
			if n == nil {
				return yamlfile.Field(epPath, "no node %q in topology.nodes", node)
			}
			if len(ifn) > maxIfName {
				return yamlfile.Field(epPath, "interface name %q is %d characters; Linux allows at most %d", ifn, len(ifn), maxIfName)
			}
			if !ifNameRE.MatchString(ifn) {
				return yamlfile.Field(epPath, "interface name %q: use letters, digits, '_' and '-'", ifn)
			}
			if n.Iface(ifn) != nil || (j == 1 && ends[0] == n && names[0] == ifn) {
				return yamlfile.Field(epPath, "%s is used by two links", ep)
			}
			ends[j], names[j] = n, ifn
		}
		if ends[0] == ends[1] {
			return yamlfile.Field(path+".endpoints", "a link must join two different nodes")
		}
		if ls.MTU != 0 && (ls.MTU < 576 || ls.MTU > 65535) {
			return yamlfile.Field(path+".mtu", "%d is out of range (576-65535)", ls.MTU)
		}
		b.link(ends[0], names[0], ends[1], names[1], ls.Rate, ls.MTU)
	}
	for _, n := range b.g.Nodes {
		if n.Kind != Host {
			continue
		}
		path := "topology.nodes." + n.Name
		if len(n.Ifaces) != 1 {
			return yamlfile.Field(path, "host %s has %d links; a host has exactly one, to a switch", n.Name, len(n.Ifaces))
		}
		if n.Ifaces[0].Peer.Node.Kind != Switch {
			return yamlfile.Field(path, "host %s is linked to host %s; hosts connect to switches", n.Name, n.Ifaces[0].Peer.Node.Name)
		}
	}
	return nil
}

// sortHostsFirst orders nodes hosts-then-switches, keeping generator order
// within each kind, so listings read naturally.
func sortHostsFirst(g *Graph) {
	sort.SliceStable(g.Nodes, func(i, j int) bool {
		return g.Nodes[i].Kind == Host && g.Nodes[j].Kind != Host
	})
}

// address numbers every interface.
//
// Hosts: unless fixed by the generator, the hosts of the a-th switch that
// has hosts (a = 1, 2, …) live in 10.<a/256>.<a%256>.0/24 as .2, .3, …, and
// the switch answers as .1 on each host-facing port. A fat tree instead
// follows Al-Fares (10.pod.edge.2…). Either way the host holds its address
// as a /32 with the gateway as point-to-point peer, so hosts never ARP for
// each other and every packet crosses the switch.
//
// Switch-to-switch links are numbered from 10.255.0.0/16, two addresses a
// link. Hosts may not use that range.
func (b *builder) address(fatTree bool) error {
	g := b.g
	used := map[netip.Addr]string{}
	access := 0
	for _, sw := range g.Switches() {
		var hostIfs []*Iface
		for _, i := range sw.Ifaces {
			if i.Peer.Node.Kind == Host {
				hostIfs = append(hostIfs, i)
			}
		}
		if len(hostIfs) == 0 {
			continue
		}
		if len(hostIfs) > maxHostsPerSw {
			return yamlfile.Field("topology", "switch %s has %d hosts; at most %d fit its /24", sw.Name, len(hostIfs), maxHostsPerSw)
		}
		access++
		auto := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(access >> 8), byte(access), 0}), 24)
		seen := map[netip.Prefix]bool{}
		for n, swIf := range hostIfs {
			h := swIf.Peer.Node
			p, fixed := b.hostAddr[h]
			if !fixed {
				p = netip.PrefixFrom(nth(auto.Addr(), n+2), 24)
			}
			gw := nth(p.Masked().Addr(), 1)
			if p.Addr() == gw || p.Addr() == p.Masked().Addr() {
				return yamlfile.Field("topology.nodes."+h.Name+".address", "%s is the subnet's network or gateway (.1) address", p)
			}
			if isFabricAddr(p.Addr()) {
				return yamlfile.Field("topology.nodes."+h.Name+".address", "%s is inside 10.255.0.0/16, which numbers switch-to-switch links", p.Addr())
			}
			if other, dup := used[p.Addr()]; dup {
				return yamlfile.Field("topology.nodes."+h.Name+".address", "%s is also the address of %s", p.Addr(), other)
			}
			used[p.Addr()] = h.Name
			h.Addr, h.Gateway = p.Addr(), gw
			h.Ifaces[0].Local, h.Ifaces[0].PeerAddr = h.Addr, gw
			swIf.Local, swIf.PeerAddr = gw, h.Addr
			// Other switches reach these hosts by the access subnet when
			// the addresses were generated (one route per switch), and by
			// each host's /32 when the user chose them.
			dst := p.Masked()
			if fixed && !fatTree {
				dst = netip.PrefixFrom(h.Addr, 32)
			}
			if !seen[dst] {
				seen[dst] = true
				sw.prefixes = append(sw.prefixes, dst)
			}
		}
	}
	n := 0
	for _, l := range g.Links {
		if l.Class != FabricLink {
			continue
		}
		if n >= 1<<15 {
			return yamlfile.Field("topology", "more than %d switch-to-switch links", 1<<15)
		}
		base := netip.AddrFrom4([4]byte{fabricNetFirst, fabricNetOctet, 0, 0})
		l.A.Local, l.B.Local = nth(base, 2*n), nth(base, 2*n+1)
		l.A.PeerAddr, l.B.PeerAddr = l.B.Local, l.A.Local
		n++
	}
	return nil
}

func isFabricAddr(a netip.Addr) bool {
	b := a.As4()
	return b[0] == fabricNetFirst && b[1] == fabricNetOctet
}

// nth returns base + n.
func nth(base netip.Addr, n int) netip.Addr {
	b := base.As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v += uint32(n)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// route gives every switch a route to every host prefix it does not own,
// over all neighbours one hop closer to the prefix's switch: equal-cost
// multipath, as a fat tree's ECMP needs. Distances come from one BFS per
// access switch over switch-to-switch links.
func route(g *Graph) {
	switches := g.Switches()
	index := make(map[*Node]int, len(switches))
	for i, s := range switches {
		index[s] = i
	}
	dist := make([]int, len(switches))
	queue := make([]*Node, 0, len(switches))
	for _, dst := range switches {
		if len(dst.prefixes) == 0 {
			continue
		}
		for i := range dist {
			dist[i] = -1
		}
		dist[index[dst]] = 0
		queue = append(queue[:0], dst)
		for len(queue) > 0 {
			n := queue[0]
			queue = queue[1:]
			for _, i := range n.Ifaces {
				p := i.Peer.Node
				if p.Kind == Switch && dist[index[p]] < 0 {
					dist[index[p]] = dist[index[n]] + 1
					queue = append(queue, p)
				}
			}
		}
		for _, s := range switches {
			d := dist[index[s]]
			if s == dst || d < 0 {
				continue
			}
			var hops []*Iface
			for _, i := range s.Ifaces {
				p := i.Peer.Node
				if p.Kind == Switch && dist[index[p]] == d-1 {
					hops = append(hops, i)
				}
			}
			for _, pfx := range dst.prefixes {
				s.Routes = append(s.Routes, Route{Dst: pfx, NextHops: hops})
			}
		}
	}
}
