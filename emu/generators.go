package emu

import (
	"cmp"
	"fmt"
	"net/netip"
	"strings"

	"github.com/fabric-emu/fabric/internal/yamlfile"
)

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
			edges[p] = append(edges[p], b.node(fmt.Sprintf("p%de%d", p, e), SwitchNode, "edge"))
		}
		for a := 0; a < half; a++ {
			aggs[p] = append(aggs[p], b.node(fmt.Sprintf("p%da%d", p, a), SwitchNode, "agg"))
		}
		for e := 0; e < half; e++ {
			for i := 0; i < half; i++ {
				h := b.node(fmt.Sprintf("h%d", host), HostNode, "host")
				host++
				b.link(h, "", edges[p][e], "", nil)
				// Al-Fares §3.2: host addresses are 10.pod.switch.ID, ID in [2, k/2+1].
				b.hostAddr[h] = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(p), byte(e), byte(i + 2)}), 24)
			}
		}
		for e := 0; e < half; e++ {
			for a := 0; a < half; a++ {
				b.link(edges[p][e], "", aggs[p][a], "", nil)
			}
		}
	}
	for c := 0; c < half*half; c++ {
		core := b.node(fmt.Sprintf("c%d", c), SwitchNode, "core")
		for p := 0; p < k; p++ {
			b.link(aggs[p][c/half], "", core, "", nil)
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
		leaf := b.node(fmt.Sprintf("l%d", l), SwitchNode, "leaf")
		leaves = append(leaves, leaf)
		for i := 0; i < t.HostsPerLeaf; i++ {
			h := b.node(fmt.Sprintf("h%d", host), HostNode, "host")
			host++
			b.link(h, "", leaf, "", nil)
		}
	}
	for s := 0; s < t.Spines; s++ {
		spine := b.node(fmt.Sprintf("s%d", s), SwitchNode, "spine")
		for _, leaf := range leaves {
			b.link(leaf, "", spine, "", nil)
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
	sw := b.node("s0", SwitchNode, "tor")
	for i := 0; i < n; i++ {
		b.link(b.node(fmt.Sprintf("h%d", i), HostNode, "host"), "", sw, "", nil)
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
	s0, s1 := b.node("s0", SwitchNode, "tor"), b.node("s1", SwitchNode, "tor")
	for i := 0; i < left+right; i++ {
		sw := s0
		if i >= left {
			sw = s1
		}
		b.link(b.node(fmt.Sprintf("h%d", i), HostNode, "host"), "", sw, "", nil)
	}
	b.link(s0, "", s1, "", nil)
	return nil
}

// custom builds explicit nodes and links. Nodes are created in name order
// so that the result does not depend on YAML map order.
func (b *builder) custom(t TopologySpec) error {
	if len(t.Nodes) == 0 {
		return yamlfile.Field("topology.nodes", "a custom topology needs nodes")
	}
	b.hostAddr = map[*Node]netip.Prefix{}
	tiers := map[string]bool{}
	for _, name := range sortedKeys(t.Nodes) {
		if err := b.customNode(name, t.Nodes[name], tiers); err != nil {
			return err
		}
	}
	b.g.Tiers = sortedKeys(tiers)
	if len(t.Links) == 0 {
		return yamlfile.Field("topology.links", "a custom topology needs links")
	}
	for i, ls := range t.Links {
		if err := b.customLink(fmt.Sprintf("topology.links[%d]", i), ls); err != nil {
			return err
		}
	}
	return b.checkHostLinks()
}

// customNode adds one node of a custom topology, and its tier to tiers.
func (b *builder) customNode(name string, ns NodeSpec, tiers map[string]bool) error {
	path := "topology.nodes." + name
	if !nodeNameRE.MatchString(name) || len(name) > 32 {
		return yamlfile.Field(path, "node name %q must be 1-32 characters of letters, digits, '_' and '-'", name)
	}
	switch ns.Kind {
	case "host":
		if ns.Tier != "" {
			return yamlfile.Field(path+".tier", "only switches have a tier")
		}
		n := b.node(name, HostNode, "host")
		if ns.Address == "" {
			return nil
		}
		p, err := netip.ParsePrefix(ns.Address)
		if err != nil || !p.Addr().Is4() || p.Bits() > 30 || p.Bits() < 8 {
			return yamlfile.Field(path+".address", "%q: want an IPv4 address with its subnet, e.g. 10.9.0.2/24", ns.Address)
		}
		b.hostAddr[n] = p
	case "switch":
		if ns.Address != "" {
			return yamlfile.Field(path+".address", "switch addresses are assigned per link; only hosts take an address")
		}
		tier := cmp.Or(ns.Tier, "switch")
		tiers[tier] = true
		b.node(name, SwitchNode, tier)
	case "":
		return yamlfile.Field(path+".kind", "is required: host or switch")
	default:
		return yamlfile.Field(path+".kind", "unknown kind %q: want host or switch", ns.Kind)
	}
	return nil
}

// customLink adds one link of a custom topology.
func (b *builder) customLink(path string, ls CustomLink) error {
	if len(ls.Endpoints) != 2 {
		return yamlfile.Field(path+".endpoints", "want exactly two endpoints \"node:ifname\", got %d", len(ls.Endpoints))
	}
	var ends [2]*Node
	var names [2]string
	for j, ep := range ls.Endpoints {
		n, ifn, err := b.customEndpoint(fmt.Sprintf("%s.endpoints[%d]", path, j), ep)
		if err != nil {
			return err
		}
		if j == 1 && ends[0] == n && names[0] == ifn {
			return yamlfile.Field(fmt.Sprintf("%s.endpoints[%d]", path, j), "%s is used by two links", ep)
		}
		ends[j], names[j] = n, ifn
	}
	if ends[0] == ends[1] {
		return yamlfile.Field(path+".endpoints", "a link must join two different nodes")
	}
	if ls.MTU != 0 && (ls.MTU < 576 || ls.MTU > 65535) {
		return yamlfile.Field(path+".mtu", "%d is out of range (576-65535)", ls.MTU)
	}
	b.link(ends[0], names[0], ends[1], names[1], &ls)
	return nil
}

// customEndpoint resolves "node:ifname" to a node and a free interface name.
func (b *builder) customEndpoint(path, ep string) (*Node, string, error) {
	node, ifn, ok := strings.Cut(ep, ":")
	if !ok || node == "" || ifn == "" {
		return nil, "", yamlfile.Field(path, "%q: want \"node:ifname\"", ep)
	}
	n := b.g.byName[node]
	switch {
	case n == nil:
		return nil, "", yamlfile.Field(path, "no node %q in topology.nodes", node)
	case len(ifn) > maxIfName:
		return nil, "", yamlfile.Field(path, "interface name %q is %d characters; Linux allows at most %d", ifn, len(ifn), maxIfName)
	case !ifNameRE.MatchString(ifn):
		return nil, "", yamlfile.Field(path, "interface name %q: use letters, digits, '_' and '-'", ifn)
	case n.Iface(ifn) != nil:
		return nil, "", yamlfile.Field(path, "%s is used by two links", ep)
	}
	return n, ifn, nil
}

// checkHostLinks requires every host of a custom topology to have exactly
// one link, to a switch.
func (b *builder) checkHostLinks() error {
	for _, n := range b.g.Hosts() {
		path := "topology.nodes." + n.Name
		if len(n.Ifaces) != 1 {
			return yamlfile.Field(path, "host %s has %d links; a host has exactly one, to a switch", n.Name, len(n.Ifaces))
		}
		if n.Ifaces[0].Peer.Node.Kind != SwitchNode {
			return yamlfile.Field(path, "host %s is linked to host %s; hosts connect to switches", n.Name, n.Ifaces[0].Peer.Node.Name)
		}
	}
	return nil
}
