package emu

import (
	"fmt"

	"fabric/internal/units"
)

// NewCustom starts a custom topology in Go, in the spirit of a Mininet
// script:
//
//	spec := emu.NewCustom("mini").AddSwitch("s1").AddHost("h1").AddHost("h2").
//		AddLink("h1", "s1").AddLink("h2", "s1")
//	lab, err := emu.Up(ctx, spec)
//
// Interfaces are named eth0, eth1, … per node in the order links are added.
func NewCustom(name string) *Spec {
	return &Spec{Name: name, Topology: TopologySpec{Kind: KindCustom, Nodes: map[string]NodeSpec{}}}
}

// AddHost adds a host with a generated address.
func (s *Spec) AddHost(name string) *Spec {
	s.Topology.Nodes[name] = NodeSpec{Kind: "host"}
	return s
}

// AddSwitch adds a switch (tier "switch").
func (s *Spec) AddSwitch(name string) *Spec {
	s.Topology.Nodes[name] = NodeSpec{Kind: "switch"}
	return s
}

// AddLink joins a and b at the link defaults.
func (s *Spec) AddLink(a, b string) *Spec { return s.AddLinkRate(a, b, 0) }

// AddLinkRate joins a and b at rate (0 for the default).
func (s *Spec) AddLinkRate(a, b string, rate units.Rate) *Spec {
	l := LinkSpec{Endpoints: []string{s.nextIf(a), s.nextIf(b)}}
	if rate > 0 {
		l.Rate = &rate
	}
	s.Topology.Links = append(s.Topology.Links, l)
	return s
}

func (s *Spec) nextIf(node string) string {
	n := 0
	for _, l := range s.Topology.Links {
		for _, ep := range l.Endpoints {
			if len(ep) > len(node) && ep[:len(node)+1] == node+":" {
				n++
			}
		}
	}
	return fmt.Sprintf("%s:eth%d", node, n)
}
