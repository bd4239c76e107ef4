package emu

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/fabric-emu/fabric/hosts"
	"github.com/fabric-emu/fabric/hosts/cc"
	"github.com/fabric-emu/fabric/internal/ethtool"
	"github.com/fabric-emu/fabric/internal/netnsutil"
	"github.com/fabric-emu/fabric/tc"
)

// Up builds the lab described by spec: a namespace per node, a veth pair
// per link, addresses, ECMP routes and a queue on every egress port. On
// any error it removes everything it made and returns the error.
func Up(ctx context.Context, spec *Spec) (*Lab, error) {
	if err := RequireRoot(); err != nil {
		return nil, err
	}
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	g, err := spec.Resolve() // the graph Validate resolved
	if err != nil {
		return nil, err
	}
	if err := spec.checkImpairments(g); err != nil {
		return nil, err
	}
	if existing, _ := netnsutil.LabPaths(spec.Name); len(existing) > 0 {
		return nil, fmt.Errorf("lab %q already exists: %d namespaces named %s* (remove them with: fabric down %s)", spec.Name, len(existing), netnsutil.Name(spec.Name, ""), spec.Name)
	}
	if err := claimLabDir(spec.Name); err != nil {
		return nil, err
	}
	st := &State{Lab: spec.Name, Phase: phaseBuilding, PID: os.Getpid(), Created: time.Now().UTC(), Spec: spec}
	if err := writeState(st); err != nil {
		os.RemoveAll(LabDir(spec.Name))
		return nil, err
	}
	b := &build{lab: spec.Name, spec: spec, g: g, nodes: map[*Node]*nodeHandles{}}
	if err := b.run(ctx, st); err != nil {
		b.close()
		if derr := Down(context.WithoutCancel(ctx), spec.Name); derr != nil {
			err = errors.Join(err, fmt.Errorf("rollback: %w", derr))
		}
		return nil, fmt.Errorf("lab %s: %w", spec.Name, err)
	}
	b.close()
	st.Phase = phaseUp
	if err := writeState(st); err != nil {
		return nil, errors.Join(err, Down(context.WithoutCancel(ctx), spec.Name))
	}
	lab := &Lab{Name: spec.Name, Spec: spec, Graph: g}
	// Pacers go on last: they join the HTB tree tc built on each NIC.
	if err := lab.StartPacers(ctx, spec.PacedHosts(g)); err != nil {
		return nil, errors.Join(err, lab.Down(context.WithoutCancel(ctx)))
	}
	if err := lab.startDelayLoop(); err != nil {
		return nil, errors.Join(err, lab.Down(context.WithoutCancel(ctx)))
	}
	return lab, nil
}

// build is one run of Up.
type build struct {
	lab     string
	spec    *Spec
	g       *Graph
	mu      sync.Mutex
	nodes   map[*Node]*nodeHandles
	delayNS *nodeHandles // the delay namespace's, when links have delay or loss
	// spent sums worker time per configure step, for the debug log.
	spent struct{ routes, ports atomic.Int64 }
}

// nodeHandles holds what the build keeps open per namespace.
type nodeHandles struct {
	ns      netns.NsHandle
	nl      *netlink.Handle
	ethtool int // socket inside the namespace, for offload ioctls
}

func (c *nodeHandles) close() {
	if c.nl != nil {
		c.nl.Close()
	}
	if c.ns.IsOpen() {
		c.ns.Close()
	}
	if c.ethtool > 0 {
		unix.Close(c.ethtool)
	}
}

func (b *build) close() {
	for _, c := range b.nodes {
		c.close()
	}
	b.nodes = map[*Node]*nodeHandles{}
	if b.delayNS != nil {
		b.delayNS.close()
		b.delayNS = nil
	}
}

func (b *build) run(ctx context.Context, st *State) error {
	if name := b.spec.Hosts.CC; name != "" {
		// Registered before any host namespace sets it as its default;
		// the pin under the lab's BPF directory goes at Down.
		if _, err := cc.Register(ctx, b.lab, name); err != nil {
			return fmt.Errorf("hosts.cc %s: %w", name, err)
		}
	}
	t0 := time.Now()
	if err := b.namespaces(ctx, st); err != nil {
		return err
	}
	t1 := time.Now()
	if err := b.links(ctx); err != nil {
		return err
	}
	t2 := time.Now()
	if err := parallel(ctx, b.g.Nodes, b.configure); err != nil {
		return err
	}
	if b.delayNS != nil {
		if err := b.configureDelayNS(ctx); err != nil {
			return err
		}
		if err := b.steerReleases(ctx); err != nil {
			return err
		}
	}
	slog.Debug("lab built", "lab", b.lab, "namespaces", t1.Sub(t0), "links", t2.Sub(t1), "configure", time.Since(t2),
		"routes_worker_time", time.Duration(b.spent.routes.Load()), "ports_worker_time", time.Duration(b.spent.ports.Load()))
	return nil
}

// switchSysctls make a namespace an ECMP router. rp_filter is off because
// ECMP makes paths asymmetric; IPv6 is off so that router solicitations and
// DAD do not add packets to captures.
var switchSysctls = [][2]string{
	{"net.ipv4.ip_forward", "1"},
	{"net.ipv4.conf.all.rp_filter", "0"},
	{"net.ipv4.conf.default.rp_filter", "0"},
}

// setECMPHash makes the switch in this namespace spread flows over
// equal-cost paths by their 5-tuple, hashed with a seed of its own.
//
// A shared hash polarizes ECMP: each switch computes the same hash for a
// flow, so a flow's choice at an aggregation switch repeats its choice at
// the edge, and in a k=4 fat tree the flows from one host to another pod
// reached only 2 of the 4 core switches. Two things make the hash shared:
// policy 1 (L4) reuses the L4 hash the sender's socket stamped on the
// packet, which crosses every veth unchanged, and every namespace has the
// same default key. So the switch uses policy 3 (the fields listed in
// fib_multipath_hash_fields, always hashed afresh) over the 5-tuple, with
// a seed derived from its name, so that a topology routes a given flow the
// same way in every lab. Kernels before 6.11 have no per-namespace seed,
// and before 5.12 no policy 3: there the switch falls back to what exists
// (policy 1), and flows may polarize.
func setECMPHash(switchName string) error {
	h := fnv.New32a()
	h.Write([]byte(switchName))
	seed := max(h.Sum32(), 1) // 0 means "the kernel's shared key"
	if err := writeSysctl("net.ipv4.fib_multipath_hash_seed", strconv.FormatUint(uint64(seed), 10)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	const fiveTuple = 0x01 | 0x02 | 0x04 | 0x10 | 0x20 // src/dst IP, protocol, src/dst port
	if writeSysctl("net.ipv4.fib_multipath_hash_fields", strconv.Itoa(fiveTuple)) == nil &&
		writeSysctl("net.ipv4.fib_multipath_hash_policy", "3") == nil {
		return nil
	}
	return writeSysctl("net.ipv4.fib_multipath_hash_policy", "1")
}

// commonSysctls apply to every node. Only "default" is needed for IPv6:
// it covers the veths made afterwards, and "all" costs about three times
// as much to write per namespace.
var commonSysctls = [][2]string{
	{"net.ipv6.conf.default.disable_ipv6", "1"},
}

// namespaces creates every node's namespace and, from inside it, sets its
// sysctls and opens the handles the later steps use.
func (b *build) namespaces(ctx context.Context, st *State) error {
	rt := b.spec.Hosts.RuntimeName()
	var hostRT hosts.Runtime
	if !hosts.IsNetNS(rt) {
		var err error
		if hostRT, err = hosts.Lookup(rt); err != nil {
			return err
		}
	}
	var refsMu sync.Mutex
	err := parallel(ctx, b.g.Nodes, func(ctx context.Context, n *Node) error {
		path := netnsutil.Path(b.lab, n.Name)
		prepare := func() error { return b.prepare(n) }
		if n.Kind == HostNode && hostRT != nil {
			ref := hosts.Ref{Lab: b.lab, Node: n.Name, NetNS: path, Runtime: rt, Image: b.spec.Hosts.Image, RunDir: LabDir(b.lab), Hold: b.spec.Hosts.Hold}
			refsMu.Lock()
			st.Hosts = append(st.Hosts, ref) // recorded before Create so a crash still finds it
			refsMu.Unlock()
			if err := hostRT.Create(ctx, ref); err != nil {
				return fmt.Errorf("runtime %s: %w", rt, err) // the runtime names the host
			}
			return netnsutil.Do(path, prepare)
		}
		return netnsutil.Create(path, prepare)
	})
	if len(st.Hosts) > 0 {
		err = errors.Join(err, writeState(st))
	}
	if err == nil && b.g.HasDelayLines() {
		err = b.createDelayNS()
	}
	return err
}

// prepare runs inside n's new namespace.
func (b *build) prepare(n *Node) error {
	sysctls := commonSysctls
	if n.Kind == SwitchNode {
		sysctls = append(append([][2]string{}, sysctls...), switchSysctls...)
	}
	for _, kv := range sysctls {
		if err := ensureSysctl(kv[0], kv[1]); err != nil {
			return fmt.Errorf("%s: %w", n.Name, err)
		}
	}
	if n.Kind == SwitchNode {
		if err := setECMPHash(n.Name); err != nil {
			return fmt.Errorf("%s: %w", n.Name, err)
		}
	}
	if n.Kind == HostNode && b.spec.Hosts.CC != "" {
		if err := writeSysctl("net.ipv4.tcp_congestion_control", b.spec.Hosts.CC); err != nil {
			return fmt.Errorf("%s: hosts.cc: %w", n.Name, err)
		}
		if cc.NeedsECN(b.spec.Hosts.CC) { // DCTCP needs ECN negotiated (RFC 8257 §3)
			if err := writeSysctl("net.ipv4.tcp_ecn", "1"); err != nil {
				return fmt.Errorf("%s: hosts.cc: %w", n.Name, err)
			}
		}
	}
	if n.Kind == HostNode {
		for _, k := range sortedKeys(b.spec.Hosts.Sysctls) {
			if err := writeSysctl(k, b.spec.Hosts.Sysctls[k]); err != nil {
				return fmt.Errorf("%s: hosts.sysctls: %w", n.Name, err)
			}
		}
	}
	c, err := openHandles()
	if err != nil {
		return err
	}
	b.mu.Lock()
	b.nodes[n] = c
	b.mu.Unlock()
	return nil
}

// links creates every veth pair from inside its A-end namespace, with the
// B end placed directly into its own namespace: nothing is ever created in
// the root namespace. Links are grouped by A node so that each netlink
// handle is used by one goroutine at a time.
func (b *build) links(ctx context.Context) error {
	byNode := map[*Node][]*Link{}
	var order []*Node
	for _, l := range b.g.Links {
		if byNode[l.A.Node] == nil {
			order = append(order, l.A.Node)
		}
		byNode[l.A.Node] = append(byNode[l.A.Node], l)
	}
	err := parallel(ctx, order, func(_ context.Context, n *Node) error {
		h := b.nodes[n].nl
		for _, l := range byNode[n] {
			// A impaired link's A end meets the delay namespace, which wears B's MAC.
			peer, peerNS := l.B.Name, b.nodes[l.B.Node].ns
			if l.impaired() {
				peer, peerNS = delayIfname(l.A), b.delayNS.ns
			}
			veth := &netlink.Veth{
				LinkAttrs:        netlink.LinkAttrs{Name: l.A.Name, MTU: l.MTU, TxQLen: -1, HardwareAddr: l.A.MAC()},
				PeerName:         peer,
				PeerHardwareAddr: l.B.MAC(),
				PeerMTU:          uint32(l.MTU),
				PeerTxQLen:       -1,
				PeerNamespace:    netlink.NsFd(peerNS),
			}
			if err := h.LinkAdd(veth); err != nil {
				return fmt.Errorf("link %s – %s: %w", l.A.Label(), l.B.Label(), err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, l := range b.g.Links {
		if l.impaired() {
			if err := b.vethDelayNSToB(l); err != nil {
				return err
			}
		}
	}
	return nil
}

// configure brings n's interfaces up with offloads off, numbers them,
// installs routes and gives every egress port its queue.
func (b *build) configure(ctx context.Context, n *Node) error {
	c := b.nodes[n]
	h := c.nl
	lo, err := h.LinkByName("lo")
	if err == nil {
		err = h.LinkSetUp(lo)
	}
	if err != nil {
		return fmt.Errorf("%s: lo: %w", n.Name, err)
	}
	index := map[*Iface]int{}
	for _, i := range n.Ifaces {
		if index[i], err = b.configureIface(c, i); err != nil {
			return err
		}
	}
	if n.Kind == HostNode {
		if err := h.RouteAdd(b.defaultRoute(n.Ifaces[0], index)); err != nil {
			return fmt.Errorf("%s: default route via %s: %w", n.Name, n.Ifaces[0].PeerAddr, err)
		}
	}
	tRoutes := time.Now()
	for _, r := range n.Routes {
		if err := h.RouteAdd(kernelRoute(r, index)); err != nil {
			return fmt.Errorf("%s: route %s: %w", n.Name, r.Dst, err)
		}
	}
	tPorts := time.Now()
	defer func() {
		b.spent.routes.Add(int64(tPorts.Sub(tRoutes)))
		b.spent.ports.Add(int64(time.Since(tPorts)))
	}()
	var ports []tc.PortConfig
	for _, i := range n.Ifaces {
		port, err := b.spec.Port(i)
		if err != nil {
			return err
		}
		ports = append(ports, tc.PortConfig{Target: portTarget(b.lab, i), Port: port})
	}
	if err := tc.ApplyNode(ctx, ports); err != nil {
		return fmt.Errorf("%s: queues: %w", n.Name, err)
	}
	return nil
}

// configureIface turns i's offloads off unless its link keeps them, gives
// it its point-to-point address and its peer's permanent neighbour entry,
// brings it up and returns its index.
func (b *build) configureIface(c *nodeHandles, i *Iface) (int, error) {
	h := c.nl
	link, err := h.LinkByName(i.Name)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", i.Label(), err)
	}
	if !i.Link.Offloads {
		if err := ethtool.SetOffloads(c.ethtool, i.Name, ethtool.Offloads{}); err != nil {
			return 0, fmt.Errorf("%s: %w", i.Label(), err)
		}
		// With GSO off TCP still builds multi-segment skbs, and they
		// are only split after the qdisc: the queue and its markers
		// would see 5-7 KB packets. One segment per skb makes every
		// queued packet a wire packet.
		if err := h.LinkSetGSOMaxSegs(link, 1); err != nil {
			return 0, fmt.Errorf("%s: gso_max_segs: %w", i.Label(), err)
		}
	}
	addr := &netlink.Addr{IPNet: hostNet(i.Local), Peer: hostNet(i.PeerAddr)}
	if err := h.AddrAdd(link, addr); err != nil {
		return 0, fmt.Errorf("%s: address %s peer %s: %w", i.Label(), i.Local, i.PeerAddr, err)
	}
	neigh := &netlink.Neigh{LinkIndex: link.Attrs().Index, Family: netlink.FAMILY_V4, State: netlink.NUD_PERMANENT,
		IP: net.IP(i.PeerAddr.AsSlice()), HardwareAddr: i.Peer.MAC()}
	if err := h.NeighAdd(neigh); err != nil {
		return 0, fmt.Errorf("%s: neighbour %s: %w", i.Label(), i.PeerAddr, err)
	}
	if err := h.LinkSetUp(link); err != nil {
		return 0, fmt.Errorf("%s: up: %w", i.Label(), err)
	}
	return link.Attrs().Index, nil
}

// defaultRoute is a host's route through its one uplink, with the lab's
// rto_min and quickack settings.
func (b *build) defaultRoute(gw *Iface, index map[*Iface]int) *netlink.Route {
	r := &netlink.Route{LinkIndex: index[gw], Gw: net.IP(gw.PeerAddr.AsSlice()), Dst: nil}
	// Only a locked rto_min metric overrides the kernel's (tcp_rto_min).
	if ms := int(b.spec.Hosts.RTOMin / time.Millisecond); ms > 0 {
		r.RtoMin, r.RtoMinLock = ms, true
	}
	if b.spec.Hosts.QuickAck {
		r.QuickACK = 1
	}
	return r
}

func kernelRoute(r Route, index map[*Iface]int) *netlink.Route {
	dst := &net.IPNet{IP: net.IP(r.Dst.Addr().AsSlice()), Mask: net.CIDRMask(r.Dst.Bits(), 32)}
	if len(r.NextHops) == 1 {
		i := r.NextHops[0]
		return &netlink.Route{Dst: dst, LinkIndex: index[i], Gw: net.IP(i.PeerAddr.AsSlice())}
	}
	route := &netlink.Route{Dst: dst}
	for _, i := range r.NextHops {
		route.MultiPath = append(route.MultiPath, &netlink.NexthopInfo{LinkIndex: index[i], Gw: net.IP(i.PeerAddr.AsSlice())})
	}
	return route
}

func hostNet(a netip.Addr) *net.IPNet {
	return &net.IPNet{IP: net.IP(a.AsSlice()), Mask: net.CIDRMask(32, 32)}
}
