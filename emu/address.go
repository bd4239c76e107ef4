package emu

import (
	"net/netip"

	"github.com/fabric-emu/fabric/internal/yamlfile"
)

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
	used := map[netip.Addr]string{}
	access := 0
	for _, sw := range b.g.Switches() {
		var hostIfs []*Iface
		for _, i := range sw.Ifaces {
			if i.Peer.Node.Kind == HostNode {
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
			dst, err := b.addressHost(swIf, netip.PrefixFrom(nth(auto.Addr(), n+2), 24), fatTree, used)
			if err != nil {
				return err
			}
			if !seen[dst] {
				seen[dst] = true
				sw.prefixes = append(sw.prefixes, dst)
			}
		}
	}
	return b.addressFabricLinks()
}

// addressHost numbers the host behind the switch port swIf: its fixed
// address, or else auto. It returns the prefix other switches route to it
// by: the access subnet when the address was generated (one route per
// switch), the host's /32 when the user chose it.
func (b *builder) addressHost(swIf *Iface, auto netip.Prefix, fatTree bool, used map[netip.Addr]string) (netip.Prefix, error) {
	h := swIf.Peer.Node
	p, fixed := b.hostAddr[h]
	if !fixed {
		p = auto
	}
	gw := nth(p.Masked().Addr(), 1)
	field := "topology.nodes." + h.Name + ".address"
	if p.Addr() == gw || p.Addr() == p.Masked().Addr() {
		return p, yamlfile.Field(field, "%s is the subnet's network or gateway (.1) address", p)
	}
	if isFabricAddr(p.Addr()) {
		return p, yamlfile.Field(field, "%s is inside 10.255.0.0/16, which numbers switch-to-switch links", p.Addr())
	}
	if other, dup := used[p.Addr()]; dup {
		return p, yamlfile.Field(field, "%s is also the address of %s", p.Addr(), other)
	}
	used[p.Addr()] = h.Name
	h.Addr, h.Gateway = p.Addr(), gw
	h.Ifaces[0].Local, h.Ifaces[0].PeerAddr = h.Addr, gw
	swIf.Local, swIf.PeerAddr = gw, h.Addr
	if fixed && !fatTree {
		return netip.PrefixFrom(h.Addr, 32), nil
	}
	return p.Masked(), nil
}

// addressFabricLinks numbers switch-to-switch links from 10.255.0.0/16,
// two addresses a link.
func (b *builder) addressFabricLinks() error {
	n := 0
	base := netip.AddrFrom4([4]byte{fabricNetFirst, fabricNetOctet, 0, 0})
	for _, l := range b.g.Links {
		if l.Class != FabricLink {
			continue
		}
		if n >= 1<<15 {
			return yamlfile.Field("topology", "more than %d switch-to-switch links", 1<<15)
		}
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
