package emu

import (
	"net"
	"net/netip"

	"github.com/fabric-emu/fabric/internal/units"
)

// NodeKind tells hosts from switches.
type NodeKind string

const (
	HostNode   NodeKind = "host"
	SwitchNode NodeKind = "switch"
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
	// Up and Down are the impairments after the sending port's queue, from A to
	// B and back (Iface.Impairment).
	Up, Down Impairment
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
func (g *Graph) Hosts() []*Node { return g.filter(HostNode) }

// Switches returns the switches in order.
func (g *Graph) Switches() []*Node { return g.filter(SwitchNode) }

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
