package emu

import (
	"fmt"
	"strings"
	"time"

	"github.com/fabric-emu/fabric/tc"
)

// NewCustom starts a custom topology in Go, in the spirit of a Mininet
// script:
//
//	spec := emu.NewCustom("mini").AddSwitch("s1").AddHost("h1").AddHost("h2").
//		AddLink("h1", "s1").AddLink("h2", "s1", emu.LinkRate(10*emu.Mbit), emu.LinkDelay(time.Millisecond))
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

// A LinkOption sets one thing about a link that AddLink adds.
type LinkOption func(s *Spec, l *CustomLink)

// LinkRate sets the link's rate.
func LinkRate(r Rate) LinkOption { return func(_ *Spec, l *CustomLink) { l.Rate = &r } }

// LinkMTU sets the link's MTU.
func LinkMTU(mtu int) LinkOption { return func(_ *Spec, l *CustomLink) { l.MTU = mtu } }

// LinkDelay sets the link's one-way propagation delay, both directions.
func LinkDelay(d time.Duration) LinkOption {
	return func(_ *Spec, l *CustomLink) { l.Delay = &Delay{Up: &d, Down: &d} }
}

// LinkLoss sets the link's random loss probability, both directions.
func LinkLoss(p float64) LinkOption {
	return func(_ *Spec, l *CustomLink) { l.Loss = &Loss{Up: &p, Down: &p} }
}

// LinkPorts gives the egress port of each switch end of the link these
// settings (as a ports.overrides entry of a lab file would).
func LinkPorts(p tc.PortSettings) LinkOption {
	return func(s *Spec, l *CustomLink) {
		for _, ep := range l.Endpoints {
			node, _, _ := strings.Cut(ep, ":")
			if s.Topology.Nodes[node].Kind != "switch" {
				continue
			}
			if s.Ports.Overrides == nil {
				s.Ports.Overrides = map[string]tc.PortSettings{}
			}
			s.Ports.Overrides[ep] = p
		}
	}
}

// AddLink joins a and b, at the link defaults unless options say more.
func (s *Spec) AddLink(a, b string, opts ...LinkOption) *Spec {
	l := CustomLink{Endpoints: []string{s.nextIf(a), s.nextIf(b)}}
	for _, o := range opts {
		o(s, &l)
	}
	s.Topology.Links = append(s.Topology.Links, l)
	return s
}

func (s *Spec) nextIf(node string) string {
	n := 0
	for _, l := range s.Topology.Links {
		for _, ep := range l.Endpoints {
			if strings.HasPrefix(ep, node+":") {
				n++
			}
		}
	}
	return fmt.Sprintf("%s:eth%d", node, n)
}
