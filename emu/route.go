package emu

import (
	"slices"
	"sort"
)

// sortHostsFirst orders nodes hosts-then-switches, keeping generator order
// within each kind, so listings read naturally.
func sortHostsFirst(g *Graph) {
	sort.SliceStable(g.Nodes, func(i, j int) bool {
		return g.Nodes[i].Kind == HostNode && g.Nodes[j].Kind != HostNode
	})
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
	for _, dst := range switches {
		if len(dst.prefixes) == 0 {
			continue
		}
		dist := hopsTo(dst, switches, index)
		for _, s := range switches {
			d := dist[index[s]]
			if s == dst || d < 0 {
				continue
			}
			var hops []*Iface
			for _, i := range s.Ifaces {
				p := i.Peer.Node
				if p.Kind == SwitchNode && dist[index[p]] == d-1 {
					hops = append(hops, i)
				}
			}
			for _, pfx := range dst.prefixes {
				s.Routes = append(s.Routes, Route{Dst: pfx, NextHops: hops})
			}
		}
	}
}

// hopsTo is every switch's distance in switch-to-switch hops from dst (-1:
// unreachable), by breadth-first search; index numbers the switches.
func hopsTo(dst *Node, switches []*Node, index map[*Node]int) []int {
	dist := make([]int, len(switches))
	for i := range dist {
		dist[i] = -1
	}
	dist[index[dst]] = 0
	queue := []*Node{dst}
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		for _, i := range n.Ifaces {
			p := i.Peer.Node
			if p.Kind == SwitchNode && dist[index[p]] < 0 {
				dist[index[p]] = dist[index[n]] + 1
				queue = append(queue, p)
			}
		}
	}
	return dist
}

// HostsVia lists the hosts that switch sw reaches through its interface
// ifname: the host on the link itself, or the hosts of every route with
// that interface among its next hops (one of several, for ECMP).
func (g *Graph) HostsVia(sw, ifname string) []*Node {
	n := g.Node(sw)
	if n == nil || n.Iface(ifname) == nil {
		return nil
	}
	via := n.Iface(ifname)
	if via.Peer.Node.Kind == HostNode {
		return []*Node{via.Peer.Node}
	}
	var out []*Node
	for _, h := range g.Hosts() {
		for _, r := range n.Routes {
			if r.Dst.Contains(h.Addr) && slices.Contains(r.NextHops, via) {
				out = append(out, h)
				break
			}
		}
	}
	return out
}
