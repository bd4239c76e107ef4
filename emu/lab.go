package emu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/fabric-emu/fabric/tc/delay"
	"github.com/fabric-emu/fabric/tc/pacer"

	"github.com/fabric-emu/fabric/internal/netnsutil"
	"github.com/fabric-emu/fabric/tc"
)

// Lab is a running fabric, and owns what it runs in this process: the
// pacers Up (or StartPacers) started and the delay lines. Down stops them
// before it removes the lab.
type Lab struct {
	Name  string
	Spec  *Spec
	Graph *Graph

	mu        sync.Mutex
	pacers    map[string]*pacer.Pacer // by host
	delayLoop *delay.Loop             // the delay lines, when links have delay or loss
}

// ErrNotRoot is why a lab cannot be built or removed by an ordinary user.
var ErrNotRoot = errors.New("fabric must run as root (with sudo, or in a root shell): it creates network namespaces, veth links and qdiscs")

// RequireRoot returns ErrNotRoot unless this process runs as root: the one
// check that Up, Down and experiments make before they touch the kernel.
func RequireRoot() error {
	if os.Geteuid() != 0 {
		return ErrNotRoot
	}
	return nil
}

// Open finds a running lab by name.
func Open(name string) (*Lab, error) {
	st, err := ReadState(name)
	if err != nil {
		return nil, err
	}
	if st.Phase != phaseUp {
		return nil, fmt.Errorf("lab %q is not up (phase %q; process %d may still be building it, or crashed: fabric down %s)", name, st.Phase, st.PID, name)
	}
	g, err := st.Spec.Resolve()
	if err != nil {
		return nil, fmt.Errorf("lab %q: state: %w", name, err)
	}
	return &Lab{Name: name, Spec: st.Spec, Graph: g}, nil
}

// Down stops what the lab runs in this process and removes the lab.
func (l *Lab) Down(ctx context.Context) error {
	return errors.Join(l.StopPacers(), l.StopDelayLoop(), Down(ctx, l.Name))
}

// NetNS is the namespace path of node.
func (l *Lab) NetNS(node string) (string, error) {
	if l.Graph.Node(node) == nil {
		return "", fmt.Errorf("lab %s has no node %q", l.Name, node)
	}
	return netnsutil.Path(l.Name, node), nil
}

// Do runs fn with the calling goroutine's thread inside node's namespace.
// Sockets opened in fn stay in that namespace after fn returns.
func (l *Lab) Do(node string, fn func() error) error {
	p, err := l.NetNS(node)
	if err != nil {
		return err
	}
	return netnsutil.Do(p, fn)
}

// PortTarget describes the egress port ifname of node for package tc.
func (l *Lab) PortTarget(node, ifname string) (tc.Target, error) {
	n := l.Graph.Node(node)
	if n == nil {
		return tc.Target{}, fmt.Errorf("lab %s has no node %q", l.Name, node)
	}
	i := n.Iface(ifname)
	if i == nil {
		return tc.Target{}, fmt.Errorf("lab %s: node %s has no interface %q", l.Name, node, ifname)
	}
	return portTarget(l.Name, i), nil
}

func portTarget(lab string, i *Iface) tc.Target {
	peer, peerIf, peerNS := peerOf(lab, i)
	return tc.Target{
		Lab: lab, Node: i.Node.Name, Ifname: i.Name, NetNS: netnsutil.Path(lab, i.Node.Name),
		PeerNode: peer, PeerIfname: peerIf, PeerNetNS: peerNS,
	}
}

// Port is the resolved queue of an egress interface: switch ports from
// `ports:` (defaults ← tier ← "node:ifname"), host NICs from `hosts.nic`,
// both on top of the link's rate and MTU.
func (s *Spec) Port(i *Iface) (tc.Port, error) {
	spec, section := s.Ports.For(i.Node.Name, i.Node.Tier, i.Name), "ports"
	if i.Node.Kind == HostNode {
		spec, section = s.Hosts.NIC, "hosts.nic"
	}
	p, err := spec.Resolve(i.Link.Rate, i.Link.MTU)
	if err != nil {
		return p, fmt.Errorf("%s: %s: %w", i.Label(), section, err)
	}
	return p, nil
}

// Ports lists every egress port of the lab with its resolved settings:
// switch ports first, then host NICs, in node order.
func (l *Lab) Ports() ([]PortInfo, error) {
	var out []PortInfo
	for _, kind := range []NodeKind{SwitchNode, HostNode} {
		for _, n := range l.Graph.Nodes {
			if n.Kind != kind {
				continue
			}
			for _, i := range n.Ifaces {
				p, err := l.Spec.Port(i)
				if err != nil {
					return nil, err
				}
				out = append(out, PortInfo{Iface: i, Target: portTarget(l.Name, i), Port: p})
			}
		}
	}
	return out, nil
}

// PortInfo is one egress port.
type PortInfo struct {
	Iface  *Iface
	Target tc.Target
	Port   tc.Port
}
