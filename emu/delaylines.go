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

// A link with delay or loss is spliced through the lab's delay namespace,
// fab.<lab>._delay, which holds its delay lines (package tc/delay):
//
//	A:ethX ─veth─ _delay:w<i>a   _delay:w<i>b ─veth─ B:ethY
//
// The delay namespace forwards between its two ends at layer 3, with a netfilter queue
// per delayed direction in between. Its interfaces wear the far end's MAC
// (w<i>a is B's, w<i>b is A's), so A and B keep the neighbour entries they
// would have without it. The delay namespace sits after the sending port's queue, so
// a delay never counts against a buffer, and before the far end's
// interface, so a capture there (the LMM's ingress) sees the packet after
// its delay. tc's programs on the sending port meet the same packet at the
// delay namespace's ingress (the veth peer) as they would at B's. A node name cannot
// start with '_', so the delay namespace never collides with one.
const delayNode = "_delay"

// DelayNetNS is the path of lab's delay namespace.
func DelayNetNS(lab string) string { return netnsutil.Path(lab, delayNode) }

// impaired reports whether l goes through the delay namespace.
func (l *Link) impaired() bool { return !l.Up.IsZero() || !l.Down.IsZero() }

// delayIfname is the delay namespace's interface facing end i of l.
func delayIfname(i *Iface) string {
	if i == i.Link.A {
		return fmt.Sprintf("w%da", i.Link.Index)
	}
	return fmt.Sprintf("w%db", i.Link.Index)
}

// Lines are the delay lines of g: one per delayed or lossy direction of a
// link, named "A:ethX>B:ethY", arriving on the delay namespace's interface facing the
// sender.
func (g *Graph) Lines() []delay.Line {
	var out []delay.Line
	for _, l := range g.Links {
		for _, from := range []*Iface{l.A, l.B} {
			if w := from.Impairment(); l.impaired() && !w.IsZero() {
				out = append(out, delay.Line{Name: from.Label() + ">" + from.Peer.Label(), In: delayIfname(from), Delay: w.Delay, Loss: w.Loss, Rate: float64(l.Rate), MTU: l.MTU})
			}
		}
	}
	return out
}

// createDelayNS makes the delay namespace; the build's other steps reach it as
// b.delayNS.
func (b *build) createDelayNS() error {
	return netnsutil.Create(DelayNetNS(b.lab), func() error {
		for _, kv := range [][2]string{{"net.ipv6.conf.default.disable_ipv6", "1"}, {"net.ipv4.ip_forward", "1"},
			{"net.ipv4.conf.all.rp_filter", "0"}, {"net.ipv4.conf.default.rp_filter", "0"}} {
			if err := ensureSysctl(kv[0], kv[1]); err != nil {
				return fmt.Errorf("%s: %w", delayNode, err)
			}
		}
		var err error
		b.delayNS, err = openHandles()
		return err
	})
}

// vethDelayNSToB makes the delay namespace's end facing B and B's interface, from the
// delay namespace (links made A's end and the delay namespace's end facing A).
func (b *build) vethDelayNSToB(l *Link) error {
	veth := &netlink.Veth{
		LinkAttrs:        netlink.LinkAttrs{Name: delayIfname(l.B), MTU: l.MTU, TxQLen: -1, HardwareAddr: l.A.MAC()},
		PeerName:         l.B.Name,
		PeerHardwareAddr: l.B.MAC(),
		PeerMTU:          uint32(l.MTU),
		PeerTxQLen:       -1,
		PeerNamespace:    netlink.NsFd(b.nodes[l.B.Node].ns),
	}
	if err := b.delayNS.nl.LinkAdd(veth); err != nil {
		return fmt.Errorf("link %s – delay namespace – %s: %w", l.A.Label(), l.B.Label(), err)
	}
	return nil
}

// configureDelayNS brings the delay namespace's interfaces up with offloads off and
// routes each end's arrivals out of the other end, by input interface.
func (b *build) configureDelayNS(ctx context.Context) error {
	h := b.delayNS.nl
	lo, err := h.LinkByName("lo")
	if err == nil {
		err = h.LinkSetUp(lo)
	}
	if err != nil {
		return fmt.Errorf("%s: lo: %w", delayNode, err)
	}
	for _, l := range b.g.Links {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !l.impaired() {
			continue
		}
		ends := map[*Iface]int{}
		for _, i := range []*Iface{l.A, l.B} {
			idx, err := b.delayNSEnd(i)
			if err != nil {
				return err
			}
			ends[i] = idx
		}
		for k, from := range []*Iface{l.A, l.B} {
			to := from.Peer
			table := delayTable(l, k)
			rule := netlink.NewRule()
			rule.IifName, rule.Table, rule.Priority = delayIfname(from), table, 1000
			if err := h.RuleAdd(rule); err != nil {
				return fmt.Errorf("%s: rule for %s: %w", delayNode, delayIfname(from), err)
			}
			route := &netlink.Route{Table: table, LinkIndex: ends[to], Gw: net.IP(to.Local.AsSlice()), Flags: int(netlink.FLAG_ONLINK)}
			if err := h.RouteAdd(route); err != nil {
				return fmt.Errorf("%s: route to %s: %w", delayNode, to.Label(), err)
			}
		}
	}
	return nil
}

// delayTable numbers the routing table of one direction of a impaired link.
func delayTable(l *Link, direction int) int { return 1000 + 2*l.Index + direction }

// delayNSEnd sets up the delay namespace's interface facing i: up, offloads off, one
// segment per skb, and a permanent neighbour entry for i's address.
func (b *build) delayNSEnd(i *Iface) (int, error) {
	h := b.delayNS.nl
	name := delayIfname(i)
	link, err := h.LinkByName(name)
	if err != nil {
		return 0, fmt.Errorf("%s: %s: %w", delayNode, name, err)
	}
	if err := ethtool.SetOffloads(b.delayNS.ethtool, name, ethtool.Offloads{}); err != nil {
		return 0, fmt.Errorf("%s: %s: %w", delayNode, name, err)
	}
	if err := h.LinkSetGSOMaxSegs(link, 1); err != nil {
		return 0, fmt.Errorf("%s: %s: gso_max_segs: %w", delayNode, name, err)
	}
	neigh := &netlink.Neigh{LinkIndex: link.Attrs().Index, Family: netlink.FAMILY_V4, State: netlink.NUD_PERMANENT,
		IP: net.IP(i.Local.AsSlice()), HardwareAddr: i.MAC()}
	if err := h.NeighAdd(neigh); err != nil {
		return 0, fmt.Errorf("%s: %s: neighbour %s: %w", delayNode, name, i.Local, err)
	}
	if err := h.LinkSetUp(link); err != nil {
		return 0, fmt.Errorf("%s: %s: up: %w", delayNode, name, err)
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

// peerOf is where a port's veth peer is: the delay namespace's end for a impaired link,
// the far node's interface otherwise.
func peerOf(lab string, i *Iface) (node, ifname, netnsPath string) {
	if i.Link.impaired() {
		return delayNode, delayIfname(i), DelayNetNS(lab)
	}
	return i.Peer.Node.Name, i.Peer.Name, netnsutil.Path(lab, i.Peer.Node.Name)
}

// steerReleases sets receive packet steering on both far ends of every
// impaired link, so that the kernel carries released packets on from another
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
		if !l.impaired() {
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

// startDelayLoop starts the delay lines of the lab's impaired links, run by this
// process (the Lab owns them) until Down or StopDelayLoop.
func (l *Lab) startDelayLoop() error {
	lines := l.Graph.Lines()
	if len(lines) == 0 {
		return nil
	}
	w, err := delay.Start(DelayNetNS(l.Name), lines, delaySeed(l.Name))
	if err != nil {
		return err
	}
	l.mu.Lock()
	l.delayLoop = w
	l.mu.Unlock()
	return l.writeAgentFile()
}

// delaySeed seeds the lines' loss draws from the lab's name.
func delaySeed(lab string) uint64 {
	var h uint64 = 14695981039346656037
	for _, c := range []byte(lab) {
		h = (h ^ uint64(c)) * 1099511628211
	}
	return h
}

// Impairment is the lab's delay lines when this handle runs them, else nil.
func (l *Lab) DelayLoop() *delay.Loop {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.delayLoop
}

// StopDelayLoop stops the delay lines this handle runs: from then on nothing
// crosses a delayed link.
func (l *Lab) StopDelayLoop() error {
	l.mu.Lock()
	w := l.delayLoop
	l.delayLoop = nil
	l.mu.Unlock()
	if w == nil {
		return nil
	}
	err := w.Stop()
	if h, _ := ReadAgent(l.Name); h != nil && h.PID == os.Getpid() {
		err = errors.Join(err, l.writeAgentFile())
	}
	return err
}

// delayAvailable checks that this kernel runs delay lines (a variable so
// that tests can pretend it does not).
var delayAvailable = delay.Check

// HasDelayLines reports whether the lab has a link with delay or loss,
// which delay lines carry.
func (s *Spec) HasDelayLines() bool { return len(s.impairmentFields()) > 0 }

// impairmentFields are the settings of the spec that ask for delay or loss, as
// field paths.
func (s *Spec) impairmentFields() []string {
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

// checkImpairments refuses a lab with delay or loss on a kernel that cannot run
// delay lines, naming the first setting that asks for them.
func (s *Spec) checkImpairments(g *Graph) error {
	if !g.HasDelayLines() {
		return nil
	}
	err := delayAvailable()
	if err == nil {
		return nil
	}
	field := "links"
	if f := s.impairmentFields(); len(f) > 0 {
		field = f[0]
	}
	return s.Wrap(yamlfile.Field(field, "link delay and loss need delay lines, which this kernel cannot run: %v", err))
}
