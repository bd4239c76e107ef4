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

// burstFraction is the HTB bucket, as a fraction of a full frame: a
// port passes at most that much early. A wire sends one packet after
// another, so a packet that arrives while another is on it waits; a
// bucket of frames lets an idle port pass a burst at once instead, and
// short queues vanish (fabric validate's M/D/1 check finds it). The
// bucket is also what HTB credits back to a port served late, so a small
// one loses rate to a slow softirq, which the trials' port rates show. In
// bytes, it is the same share of a frame at every scale.
const burstFraction = 10

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
	if p.Buckets > 0 {
		// The band's class is not a leaf; HTB would send what reaches an
		// inner default class unshaped (its "direct" queue).
		root.Defcls = bucketClass(p.Bands-1, 0) & 0xffff
	}
	root.Rate2Quantum = 10 // unused: every class sets its quantum
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
	whole := classShare{rate: p.Rate.BitsPerSecond(), quantum: uint32(p.MTU + frameOverhead)}
	if err := c.h.ClassAdd(p.htbClass(ifindex, root.Handle, parent, whole)); err != nil {
		return fmt.Errorf("htb class 1:1: %w", err)
	}
	for b := 0; b < p.Bands; b++ {
		if err := c.h.ClassAdd(p.htbClass(ifindex, parent, leafClass(b), p.bandShare(b))); err != nil {
			return fmt.Errorf("htb class 1:%x: %w", leafBase+b, err)
		}
		var err error
		if p.Buckets > 0 {
			err = c.addBuckets(ifindex, b, p)
		} else {
			err = c.replaceFifo(fifoFor(ifindex, leafQdisc(b), leafClass(b), p.bandBuffer(b)))
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// classShare is what an HTB class gets: a guaranteed rate (bits/s), a
// priority, a DRR quantum (bytes) and, when not the default for its rate,
// a bucket (bytes).
type classShare struct {
	rate           uint64
	prio           uint32
	quantum, burst uint32
}

// bandShare is band b's class.
// Strict priority: priorities 0..7 with a token guaranteed rate, so every
// band borrows the whole port from the parent in priority order.
// Weighted: equal priority, guaranteed rates and quanta ∝ weights (one
// frame per round per unit of weight), so each band gets its share under
// load and the rest when others are idle.
// NDP: see ndpShare.
func (p Port) bandShare(b int) classShare {
	r := p.Rate.BitsPerSecond()
	frame := uint32(p.MTU + frameOverhead)
	switch {
	case p.NDP != nil:
		return p.ndpShare(b)
	case p.Bands == 1:
		return classShare{rate: r, quantum: frame}
	case p.Weights == nil:
		return classShare{rate: max(r/1000, 8000), prio: uint32(b), quantum: frame}
	}
	sum := 0
	for _, w := range p.Weights {
		sum += w
	}
	return classShare{rate: r * uint64(p.Weights[b]) / uint64(sum), quantum: frame * uint32(p.Weights[b])}
}

// htbClass is a class of the port's tree; its ceiling is the port rate.
// Quanta are set explicitly, so the kernel neither derives them from the
// rates nor warns about them.
func (p Port) htbClass(ifindex int, parent, handle uint32, s classShare) *netlink.HtbClass {
	ceil := p.Rate.BitsPerSecond()
	burst := s.burst
	if burst == 0 {
		burst = p.burstBytes()
	}
	return netlink.NewHtbClass(netlink.ClassAttrs{LinkIndex: ifindex, Parent: parent, Handle: handle},
		netlink.HtbClassAttrs{
			Rate: s.rate, Ceil: ceil, Prio: s.prio,
			Buffer: burst, Cbuffer: p.burstBytes(),
			Quantum: s.quantum,
		})
}

// burstBytes is the HTB bucket of every class: timerSlack at the port's
// rate, and never less than a tenth of a full frame (burstFraction). HTB
// sends a packet whenever the bucket is not empty and lets it go negative,
// so an idle port passes a frame at once and the next a frame time less
// the bucket later, as a wire would within timerSlack.
func (p Port) burstBytes() uint32 {
	frame := uint32(p.MTU + frameOverhead)
	slack := uint32(float64(p.Rate.BitsPerSecond()) / 8 * timerSlack.Seconds())
	return max(1, frame/burstFraction, slack)
}

// timerSlack is how late HTB's watchdog may wake a queued port without
// costing it rate: the bucket credits a late dequeue back only up to its
// size, and a port whose bucket is smaller than its timer's lateness sends
// slower than its rate (at 100 Mbit/s with a tenth of a frame, 80 Mbit/s
// on this project's 2-core VMs, whose idle timers are 70-160 µs late at
// p99: fabric doctor). The price is the same bound on timing: a port idle
// for longer passes up to timerSlack of frames early.
const timerSlack = 100 * time.Microsecond

// bandBuffer is the drop-tail limit of band b's fifo (without buckets).
// (Link delay is not a port's: it is the wire after the port, package
// delay.)
func (p Port) bandBuffer(b int) Buffer {
	if p.NDP != nil {
		return p.ndpLimit(b)
	}
	return p.Buffer
}

// fifoFor is the fifo with handle under parent holding limit.
func fifoFor(ifindex int, handle, parent uint32, limit Buffer) fifoLeaf {
	f := fifoLeaf{ifindex: ifindex, handle: handle, parent: parent}
	if limit.Packets > 0 {
		f.packets, f.limit = true, uint32(limit.Packets)
	} else {
		f.limit = uint32(limit.Bytes)
	}
	return f
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
