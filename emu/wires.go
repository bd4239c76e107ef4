package emu

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/fabric-emu/fabric/internal/ethtool"
	"github.com/fabric-emu/fabric/internal/netnsutil"
	"github.com/fabric-emu/fabric/internal/yamlfile"
	"github.com/fabric-emu/fabric/tc/delay"
)

// A link with delay or loss is spliced through the lab's wire namespace,
// fab.<lab>._wire, which holds its delay lines (package tc/delay):
//
//	A:ethX ─veth─ _wire:w<i>a   _wire:w<i>b ─veth─ B:ethY
//
// The wire forwards between its two ends at layer 3, with a netfilter queue
// per delayed direction in between. Its interfaces wear the far end's MAC
// (w<i>a is B's, w<i>b is A's), so A and B keep the neighbour entries they
// would have without it. The wire sits after the sending port's queue, so
// a delay never counts against a buffer, and before the far end's
// interface, so a capture there (the LMM's ingress) sees the packet after
// its delay. tc's programs on the sending port meet the same packet at the
// wire's ingress (the veth peer) as they would at B's. A node name cannot
// start with '_', so the wire never collides with one.
const wireNode = "_wire"

// WireNetNS is the path of lab's wire namespace.
func WireNetNS(lab string) string { return netnsutil.Path(lab, wireNode) }

// wired reports whether l goes through the wire.
func (l *Link) wired() bool { return !l.Up.IsZero() || !l.Down.IsZero() }

// wireIfname is the wire's interface facing end i of l.
func wireIfname(i *Iface) string {
	if i == i.Link.A {
		return fmt.Sprintf("w%da", i.Link.Index)
	}
	return fmt.Sprintf("w%db", i.Link.Index)
}

// Lines are the delay lines of g: one per delayed or lossy direction of a
// link, named "A:ethX>B:ethY", arriving on the wire's interface facing the
// sender.
func (g *Graph) Lines() []delay.Line {
	var out []delay.Line
	for _, l := range g.Links {
		for _, from := range []*Iface{l.A, l.B} {
			if w := from.Wire(); l.wired() && !w.IsZero() {
				out = append(out, delay.Line{Name: from.Label() + ">" + from.Peer.Label(), In: wireIfname(from), Delay: w.Delay, Loss: w.Loss, Rate: float64(l.Rate), MTU: l.MTU})
			}
		}
	}
	return out
}

// createWire makes the wire namespace; the build's other steps reach it as
// b.wire.
func (b *build) createWire() error {
	return netnsutil.Create(WireNetNS(b.lab), func() error {
		for _, kv := range [][2]string{{"net.ipv6.conf.default.disable_ipv6", "1"}, {"net.ipv4.ip_forward", "1"},
			{"net.ipv4.conf.all.rp_filter", "0"}, {"net.ipv4.conf.default.rp_filter", "0"}} {
			if err := ensureSysctl(kv[0], kv[1]); err != nil {
				return fmt.Errorf("%s: %w", wireNode, err)
			}
		}
		var err error
		b.wire, err = openHandles()
		return err
	})
}

// vethWireToB makes the wire's end facing B and B's interface, from the
// wire's namespace (links made A's end and the wire's end facing A).
func (b *build) vethWireToB(l *Link) error {
	veth := &netlink.Veth{
		LinkAttrs:        netlink.LinkAttrs{Name: wireIfname(l.B), MTU: l.MTU, TxQLen: -1, HardwareAddr: l.A.MAC()},
		PeerName:         l.B.Name,
		PeerHardwareAddr: l.B.MAC(),
		PeerMTU:          uint32(l.MTU),
		PeerTxQLen:       -1,
		PeerNamespace:    netlink.NsFd(b.nodes[l.B.Node].ns),
	}
	if err := b.wire.nl.LinkAdd(veth); err != nil {
		return fmt.Errorf("link %s – wire – %s: %w", l.A.Label(), l.B.Label(), err)
	}
	return nil
}

// configureWire brings the wire's interfaces up with offloads off and
// routes each end's arrivals out of the other end, by input interface.
func (b *build) configureWire(ctx context.Context) error {
	h := b.wire.nl
	lo, err := h.LinkByName("lo")
	if err == nil {
		err = h.LinkSetUp(lo)
	}
	if err != nil {
		return fmt.Errorf("%s: lo: %w", wireNode, err)
	}
	for _, l := range b.g.Links {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !l.wired() {
			continue
		}
		ends := map[*Iface]int{}
		for _, i := range []*Iface{l.A, l.B} {
			idx, err := b.wireEnd(i)
			if err != nil {
				return err
			}
			ends[i] = idx
		}
		for k, from := range []*Iface{l.A, l.B} {
			to := from.Peer
			table := wireTable(l, k)
			rule := netlink.NewRule()
			rule.IifName, rule.Table, rule.Priority = wireIfname(from), table, 1000
			if err := h.RuleAdd(rule); err != nil {
				return fmt.Errorf("%s: rule for %s: %w", wireNode, wireIfname(from), err)
			}
			route := &netlink.Route{Table: table, LinkIndex: ends[to], Gw: net.IP(to.Local.AsSlice()), Flags: int(netlink.FLAG_ONLINK)}
			if err := h.RouteAdd(route); err != nil {
				return fmt.Errorf("%s: route to %s: %w", wireNode, to.Label(), err)
			}
		}
	}
	return nil
}

// wireTable numbers the routing table of one direction of a wired link.
func wireTable(l *Link, direction int) int { return 1000 + 2*l.Index + direction }

// wireEnd sets up the wire's interface facing i: up, offloads off, one
// segment per skb, and a permanent neighbour entry for i's address.
func (b *build) wireEnd(i *Iface) (int, error) {
	h := b.wire.nl
	name := wireIfname(i)
	link, err := h.LinkByName(name)
	if err != nil {
		return 0, fmt.Errorf("%s: %s: %w", wireNode, name, err)
	}
	if err := ethtool.SetOffloads(b.wire.ethtool, name, ethtool.Offloads{}); err != nil {
		return 0, fmt.Errorf("%s: %s: %w", wireNode, name, err)
	}
	if err := h.LinkSetGSOMaxSegs(link, 1); err != nil {
		return 0, fmt.Errorf("%s: %s: gso_max_segs: %w", wireNode, name, err)
	}
	neigh := &netlink.Neigh{LinkIndex: link.Attrs().Index, Family: netlink.FAMILY_V4, State: netlink.NUD_PERMANENT,
		IP: net.IP(i.Local.AsSlice()), HardwareAddr: i.MAC()}
	if err := h.NeighAdd(neigh); err != nil {
		return 0, fmt.Errorf("%s: %s: neighbour %s: %w", wireNode, name, i.Local, err)
	}
	if err := h.LinkSetUp(link); err != nil {
		return 0, fmt.Errorf("%s: %s: up: %w", wireNode, name, err)
	}
	return link.Attrs().Index, nil
}

// openHandles opens the netlink handle and ethtool socket of the calling
// thread's namespace.
func openHandles() (*nodeHandles, error) {
	c := &nodeHandles{}
	var err error
	if c.ns, err = netns.Get(); err != nil {
		return nil, err
	}
	if c.nl, err = netlink.NewHandle(unix.NETLINK_ROUTE); err != nil {
		c.close()
		return nil, err
	}
	if c.ethtool, err = ethtool.Socket(); err != nil {
		c.close()
		return nil, err
	}
	return c, nil
}

// peerOf is where a port's veth peer is: the wire's end for a wired link,
// the far node's interface otherwise.
func peerOf(lab string, i *Iface) (node, ifname, netnsPath string) {
	if i.Link.wired() {
		return wireNode, wireIfname(i), WireNetNS(lab)
	}
	return i.Peer.Node.Name, i.Peer.Name, netnsutil.Path(lab, i.Peer.Node.Name)
}

// steerReleases sets receive packet steering on both far ends of every
// wired link, so that the kernel carries released packets on from another
// CPU than the delay lines' (delay.RPSMask).
func (b *build) steerReleases(ctx context.Context) error {
	mask := delay.RPSMask()
	if mask == "" {
		return nil
	}
	for _, l := range b.g.Links {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !l.wired() {
			continue
		}
		for _, i := range []*Iface{l.A, l.B} {
			rel := "class/net/" + i.Name + "/queues/rx-0/rps_cpus"
			err := netnsutil.WriteSysfs(netnsutil.Path(b.lab, i.Node.Name), rel, mask)
			if errors.Is(err, unix.EROFS) {
				// A docker host's network namespace has sysfs mounted
				// read-only by the daemon, and a new mount shares that
				// superblock. Steering is an optimisation: the lines
				// still work, with the kernel's follow-up work on their CPU.
				slog.Debug("delay lines: released packets not steered", "iface", i.Label(), "err", err)
				continue
			}
			if err != nil {
				return fmt.Errorf("%s: rps_cpus: %w", i.Label(), err)
			}
		}
	}
	return nil
}

// startWire starts the delay lines of the lab's wired links, run by this
// process (the Lab owns them) until Down or StopWire.
func (l *Lab) startWire() error {
	lines := l.Graph.Lines()
	if len(lines) == 0 {
		return nil
	}
	w, err := delay.Start(WireNetNS(l.Name), lines, wireSeed(l.Name))
	if err != nil {
		return err
	}
	l.mu.Lock()
	l.wire = w
	l.mu.Unlock()
	return l.writeHolder()
}

// wireSeed seeds the lines' loss draws from the lab's name.
func wireSeed(lab string) uint64 {
	var h uint64 = 14695981039346656037
	for _, c := range []byte(lab) {
		h = (h ^ uint64(c)) * 1099511628211
	}
	return h
}

// Wire is the lab's delay lines when this handle runs them, else nil.
func (l *Lab) Wire() *delay.Wire {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.wire
}

// StopWire stops the delay lines this handle runs: from then on nothing
// crosses a delayed link.
func (l *Lab) StopWire() error {
	l.mu.Lock()
	w := l.wire
	l.wire = nil
	l.mu.Unlock()
	if w == nil {
		return nil
	}
	err := w.Stop()
	if h, _ := ReadHolder(l.Name); h != nil && h.PID == os.Getpid() {
		err = errors.Join(err, l.writeHolder())
	}
	return err
}

// delayAvailable checks that this kernel runs delay lines (a variable so
// that tests can pretend it does not).
var delayAvailable = delay.Check

// HasDelayLines reports whether the lab has a link with delay or loss,
// which delay lines carry.
func (s *Spec) HasDelayLines() bool { return len(s.wireFields()) > 0 }

// wireFields are the settings of the spec that ask for delay or loss, as
// field paths.
func (s *Spec) wireFields() []string {
	var out []string
	for path, d := range map[string]LinkDefaults{"links": s.Links.LinkDefaults, "links.host": s.Links.Host, "links.fabric": s.Links.Fabric} {
		if d.Delay != nil {
			out = append(out, path+".delay")
		}
		if d.Loss != nil {
			out = append(out, path+".loss")
		}
	}
	for i, l := range s.Topology.Links {
		if l.Delay != nil {
			out = append(out, fmt.Sprintf("topology.links[%d].delay", i))
		}
		if l.Loss != nil {
			out = append(out, fmt.Sprintf("topology.links[%d].loss", i))
		}
	}
	slices.Sort(out)
	return out
}

// checkWires refuses a lab with delay or loss on a kernel that cannot run
// delay lines, naming the first setting that asks for them.
func (s *Spec) checkWires(g *Graph) error {
	if !g.HasWires() {
		return nil
	}
	err := delayAvailable()
	if err == nil {
		return nil
	}
	field := "links"
	if f := s.wireFields(); len(f) > 0 {
		field = f[0]
	}
	return s.Wrap(yamlfile.Field(field, "link delay and loss need delay lines, which this kernel cannot run: %v", err))
}
