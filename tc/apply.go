package tc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Target names one egress port and the far end of its veth.
type Target struct {
	Lab, Node, Ifname string // the egress port, e.g. node "s0", ifname "eth1"
	NetNS             string // the node's namespace file, e.g. /run/netns/fab.lab.s0
	// The far end of the veth, where the phantom queue's ingress hook goes.
	PeerNode, PeerIfname, PeerNetNS string
}

func (t Target) String() string { return t.Node + ":" + t.Ifname }

// peer is the other end of t's link, as a target of its own.
func (t Target) peer() Target {
	return Target{Lab: t.Lab, Node: t.PeerNode, Ifname: t.PeerIfname, NetNS: t.PeerNetNS}
}

// The qdisc tree of a port (tc handles are major:minor, hex):
//
//	1:    htb root, default class = the last band
//	1:1   htb parent at the port rate
//	1:1b  htb leaf of band b, minor 0x10+b
//	1b:   fifo (bfifo/pfifo) under leaf 1:1b, the band's drop-tail buffer
//
// The egress program sets skb->priority to 1:1b, which HTB takes as the
// class before consulting any filter.
const (
	rootMajor   = 1
	parentMinor = 1
	leafBase    = 0x10
)

func leafClass(band int) uint32 { return netlink.MakeHandle(rootMajor, uint16(leafBase+band)) }
func leafQdisc(band int) uint32 { return netlink.MakeHandle(uint16(leafBase+band), 0) }

// burstTime is how much traffic, in time at the port rate, HTB may send
// back to back to catch up after it was served late. It is tc's classic
// default (rate/HZ on HZ=1000 kernels). The default that netlink and tc
// compute on this kernel (rate/psched-clock) is under two frames, and then
// every late softirq is rate lost for good: one TCP flow through a 1 Gbit
// port reached 83 % of the rate with a 100 µs burst, 88 % with 300 µs and
// 94 % with 1 ms on the 2-core project machine. While a queue is standing
// the bucket is empty, so the burst does not let HTB run ahead of the rate;
// it only lets an idle port pass up to one burst at once (see the
// virtual-queue error measured in TestECNThreshold).
const burstTime = time.Millisecond

// Apply builds the port on t: an HTB root at the port rate, one class per
// band, a fifo leaf per band with the configured limit, and, when needed,
// the eBPF classifier/ECN marker at clsact egress and the phantom queue at
// the peer's ingress. A plain port (one band, no marking) is four netlink
// messages and loads no eBPF. Apply can be called again on the same port
// (a retry, or new settings): it rebuilds the tree.
func Apply(ctx context.Context, t Target, p Port) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c, err := openNS(t.NetNS)
	if err != nil {
		return fmt.Errorf("port %s: %w", t, err)
	}
	defer c.Close()
	return applyWith(ctx, c, t, p)
}

// PortConfig pairs a port with its settings, for ApplyNode.
type PortConfig struct {
	Target Target
	Port   Port
}

// ApplyNode applies several ports of one namespace over a single netlink
// connection. Opening the connection (entering the namespace twice) costs
// more than building a plain port, so a lab build applies ports node by
// node. Every port must have the same Target.NetNS.
func ApplyNode(ctx context.Context, ports []PortConfig) error {
	if len(ports) == 0 {
		return nil
	}
	c, err := openNS(ports[0].Target.NetNS)
	if err != nil {
		return fmt.Errorf("port %s: %w", ports[0].Target, err)
	}
	defer c.Close()
	for _, pc := range ports {
		if pc.Target.NetNS != ports[0].Target.NetNS {
			return fmt.Errorf("port %s: ApplyNode given ports of two namespaces", pc.Target)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := applyWith(ctx, c, pc.Target, pc.Port); err != nil {
			return err
		}
	}
	return nil
}

func applyWith(ctx context.Context, c *nsConn, t Target, p Port) error {
	link, err := c.h.LinkByName(t.Ifname)
	if err != nil {
		return fmt.Errorf("port %s: %w", t, err)
	}
	if err := c.buildTree(link.Attrs().Index, p); err != nil {
		return fmt.Errorf("port %s: %w", t, err)
	}
	if err := applyPrograms(ctx, c, link, t, p); err != nil {
		return fmt.Errorf("port %s: %w", t, err)
	}
	return nil
}

func (c *nsConn) buildTree(ifindex int, p Port) error {
	root := netlink.NewHtb(netlink.QdiscAttrs{LinkIndex: ifindex, Handle: netlink.MakeHandle(rootMajor, 0), Parent: netlink.HANDLE_ROOT})
	root.Defcls = uint32(leafBase + p.Bands - 1) // unclassified traffic: lowest band
	root.Rate2Quantum = 10                       // unused: every class sets its quantum
	if err := c.h.QdiscAdd(root); err != nil {
		if !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("htb root: %w", err)
		}
		// A tree from an earlier Apply: start again, since HTB cannot move
		// classes between parents. Deleting the root drops what is queued
		// but leaves the link up.
		if err := c.h.QdiscDel(root); err != nil {
			return fmt.Errorf("replace htb root: %w", err)
		}
		if err := c.h.QdiscAdd(root); err != nil {
			return fmt.Errorf("htb root: %w", err)
		}
	}
	// 1:1 carries the port rate even with one band, so that a class added
	// beside the bands later (HULL's pacer bucket on a host NIC, tc/pacer)
	// shares the line rate with them instead of adding to it.
	parent := netlink.MakeHandle(rootMajor, parentMinor)
	if err := c.h.ClassAdd(p.htbClass(ifindex, root.Handle, parent, p.Rate.BitsPerSecond(), 0, 1)); err != nil {
		return fmt.Errorf("htb class 1:1: %w", err)
	}
	for b := 0; b < p.Bands; b++ {
		rate, prio, weight := p.bandShare(b)
		if err := c.h.ClassAdd(p.htbClass(ifindex, parent, leafClass(b), rate, prio, weight)); err != nil {
			return fmt.Errorf("htb class 1:%x: %w", leafBase+b, err)
		}
		if err := c.addLeaf(ifindex, b, p); err != nil {
			return err
		}
	}
	return nil
}

// bandShare returns band b's guaranteed rate, HTB priority and DRR weight.
// Strict priority: priorities 0..7 with a token guaranteed rate, so every
// band borrows the whole port from the parent in priority order.
// Weighted: equal priority, guaranteed rates and quanta ∝ weights, so each
// band gets its share under load and the rest when others are idle.
func (p Port) bandShare(b int) (rate uint64, prio uint32, weight int) {
	r := p.Rate.BitsPerSecond()
	switch {
	case p.Bands == 1:
		return r, 0, 1
	case p.Weights == nil:
		return max(r/1000, 8000), uint32(b), 1
	}
	sum := 0
	for _, w := range p.Weights {
		sum += w
	}
	return r * uint64(p.Weights[b]) / uint64(sum), 0, p.Weights[b]
}

func (p Port) htbClass(ifindex int, parent, handle uint32, rate uint64, prio uint32, weight int) *netlink.HtbClass {
	frame := uint32(p.MTU + frameOverhead)
	ceil := p.Rate.BitsPerSecond()
	burst := p.burstBytes
	return netlink.NewHtbClass(netlink.ClassAttrs{LinkIndex: ifindex, Parent: parent, Handle: handle},
		netlink.HtbClassAttrs{
			Rate: rate, Ceil: ceil, Prio: prio,
			Buffer: burst(rate), Cbuffer: burst(ceil),
			// One frame per round per unit of weight: DRR then splits
			// borrowed bandwidth in the weights' ratio (and the kernel does
			// not warn about quanta derived from large rates).
			Quantum: frame * uint32(weight),
		})
}

// burstBytes is the HTB bucket for a class of the given rate.
func (p Port) burstBytes(bps uint64) uint32 {
	return max(2*uint32(p.MTU+frameOverhead), uint32(float64(bps)/8*burstTime.Seconds()))
}

// addLeaf puts band b's queue under its class: the drop-tail fifo, or netem
// holding the same number of packets when the port has a delay.
func (c *nsConn) addLeaf(ifindex, b int, p Port) error {
	if p.Delay > 0 {
		limit := uint32(p.BufferBytes()) / uint32(p.MTU+frameOverhead)
		q := netlink.NewNetem(netlink.QdiscAttrs{LinkIndex: ifindex, Handle: leafQdisc(b), Parent: leafClass(b)},
			netlink.NetemQdiscAttrs{Latency: uint32(p.Delay.Microseconds()), Limit: max(limit, 1)})
		if err := c.h.QdiscReplace(q); err != nil {
			return fmt.Errorf("netem under 1:%x: %w", leafBase+b, err)
		}
		return nil
	}
	f := fifoLeaf{ifindex: ifindex, handle: leafQdisc(b), parent: leafClass(b)}
	if p.Buffer.Packets > 0 {
		f.packets, f.limit = true, uint32(p.Buffer.Packets)
	} else {
		f.limit = uint32(p.Buffer.Bytes)
	}
	return c.replaceFifo(f)
}

// Remove takes the port's qdiscs and programs off t (the link stays). It is
// not needed before deleting a namespace, which takes everything with it.
func Remove(ctx context.Context, t Target) error {
	c, link, err := openPort(t)
	if err != nil {
		if os.IsNotExist(errors.Unwrap(err)) {
			return nil
		}
		return err
	}
	defer c.Close()
	root := &netlink.Htb{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: link.Attrs().Index, Handle: netlink.MakeHandle(rootMajor, 0), Parent: netlink.HANDLE_ROOT}}
	if err := c.h.QdiscDel(root); err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("port %s: %w", t, err)
	}
	return forgetPort(ctx, c, link, t)
}
