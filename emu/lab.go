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
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"fabric/hosts/cc"
	"fabric/internal/ethtool"
	"fabric/internal/netnsutil"
	"fabric/tc"
)

// Lab is a running fabric.
type Lab struct {
	Name  string
	Spec  *Spec
	Graph *Graph
}

// Up builds the lab described by spec: a namespace per node, a veth pair
// per link, addresses, ECMP routes and a queue on every egress port. On
// any error it removes everything it made and returns the error.
func Up(ctx context.Context, spec *Spec) (*Lab, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("fabric must run as root: it creates network namespaces, veth links and qdiscs")
	}
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	g, err := spec.Resolve()
	if err != nil {
		return nil, err
	}
	if existing, _ := labNetNS(spec.Name); len(existing) > 0 {
		return nil, fmt.Errorf("lab %q already exists: %d namespaces named %s* (remove them with: fabric down %s)", spec.Name, len(existing), NetNSName(spec.Name, ""), spec.Name)
	}
	if err := claimLabDir(spec.Name); err != nil {
		return nil, err
	}
	st := &State{Lab: spec.Name, Phase: phaseBuilding, PID: os.Getpid(), Created: time.Now().UTC(), Spec: spec}
	if err := writeState(st); err != nil {
		os.RemoveAll(LabDir(spec.Name))
		return nil, err
	}
	b := &build{lab: spec.Name, spec: spec, g: g, nodes: map[*Node]*nodeCtx{}}
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
		return nil, errors.Join(err, Down(context.WithoutCancel(ctx), spec.Name))
	}
	return lab, nil
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

// Down removes the lab. It is the same as Down(ctx, l.Name).
func (l *Lab) Down(ctx context.Context) error { return Down(ctx, l.Name) }

// NetNS is the namespace path of node.
func (l *Lab) NetNS(node string) (string, error) {
	if l.Graph.Node(node) == nil {
		return "", fmt.Errorf("lab %s has no node %q", l.Name, node)
	}
	return NetNSPath(l.Name, node), nil
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
	return tc.Target{
		Lab: lab, Node: i.Node.Name, Ifname: i.Name, NetNS: NetNSPath(lab, i.Node.Name),
		PeerNode: i.Peer.Node.Name, PeerIfname: i.Peer.Name, PeerNetNS: NetNSPath(lab, i.Peer.Node.Name),
	}
}

// Port is the resolved queue of an egress interface: switch ports from
// `ports:` (defaults ← tier ← "node:ifname"), host NICs from `hosts.nic`,
// both on top of the link's rate and MTU.
func (s *Spec) Port(i *Iface) (tc.Port, error) {
	spec, section := s.Ports.For(i.Node.Name, i.Node.Tier, i.Name), "ports"
	if i.Node.Kind == Host {
		spec, section = s.Hosts.NIC, "hosts.nic"
	}
	p, err := spec.Resolve(i.Link.Rate, i.Link.MTU)
	if err != nil {
		return p, fmt.Errorf("%s: %s: %w", i.Label(), section, err)
	}
	return p, nil
}

// build is one run of Up.
type build struct {
	lab   string
	spec  *Spec
	g     *Graph
	mu    sync.Mutex
	nodes map[*Node]*nodeCtx
	// spent sums worker time per configure step, for the debug log.
	spent struct{ routes, ports atomic.Int64 }
}

// nodeCtx holds what the build keeps open per namespace.
type nodeCtx struct {
	ns      netns.NsHandle
	nl      *netlink.Handle
	ethtool int // socket inside the namespace, for offload ioctls
}

func (c *nodeCtx) close() {
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
	b.nodes = map[*Node]*nodeCtx{}
}

// workers bounds parallelism: the work is syscalls, and more threads than
// a few per core only add contention on the rtnl lock.
func workers() int { return max(4, 2*runtime.NumCPU()) }

// parallel runs fn over items with a bounded pool, stopping at the first
// error or when ctx ends.
func parallel[T any](ctx context.Context, items []T, fn func(T) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	ch := make(chan T)
	var wg sync.WaitGroup
	for w := 0; w < min(workers(), len(items)); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := range ch {
				if err := fn(it); err != nil {
					cancel(err)
				}
			}
		}()
	}
feed:
	for _, it := range items {
		select {
		case ch <- it:
		case <-ctx.Done():
			break feed
		}
	}
	close(ch)
	wg.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return ctx.Err()
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
// it covers the veths made afterwards, and "all" costs three times as
// much to write (measured 211 µs against 63 µs a namespace).
var commonSysctls = [][2]string{
	{"net.ipv6.conf.default.disable_ipv6", "1"},
}

// namespaces creates every node's namespace and, from inside it, sets its
// sysctls and opens the handles the later steps use.
func (b *build) namespaces(ctx context.Context, st *State) error {
	rt := b.spec.runtime()
	var hostRT HostRuntime
	if rt != DefaultRuntime {
		var err error
		if hostRT, err = Runtime(rt); err != nil {
			return err
		}
	}
	var refsMu sync.Mutex
	err := parallel(ctx, b.g.Nodes, func(n *Node) error {
		path := NetNSPath(b.lab, n.Name)
		prepare := func() error { return b.prepare(n) }
		if n.Kind == Host && hostRT != nil {
			ref := HostRef{Lab: b.lab, Node: n.Name, NetNS: path, Runtime: rt, Image: b.spec.Hosts.Image, RunDir: LabDir(b.lab)}
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
	return err
}

// prepare runs inside n's new namespace.
func (b *build) prepare(n *Node) error {
	sysctls := commonSysctls
	if n.Kind == Switch {
		sysctls = append(append([][2]string{}, sysctls...), switchSysctls...)
	}
	for _, kv := range sysctls {
		if err := ensureSysctl(kv[0], kv[1]); err != nil {
			return fmt.Errorf("%s: %w", n.Name, err)
		}
	}
	if n.Kind == Switch {
		if err := setECMPHash(n.Name); err != nil {
			return fmt.Errorf("%s: %w", n.Name, err)
		}
	}
	if n.Kind == Host && b.spec.Hosts.CC != "" {
		if err := writeSysctl("net.ipv4.tcp_congestion_control", b.spec.Hosts.CC); err != nil {
			return fmt.Errorf("%s: hosts.cc: %w", n.Name, err)
		}
		if b.spec.Hosts.CC == "dctcp" { // DCTCP needs ECN negotiated (RFC 8257 §3)
			if err := writeSysctl("net.ipv4.tcp_ecn", "1"); err != nil {
				return fmt.Errorf("%s: hosts.cc: %w", n.Name, err)
			}
		}
	}
	if n.Kind == Host {
		for _, k := range sortedKeys(b.spec.Hosts.Sysctls) {
			if err := writeSysctl(k, b.spec.Hosts.Sysctls[k]); err != nil {
				return fmt.Errorf("%s: hosts.sysctls: %w", n.Name, err)
			}
		}
	}
	c := &nodeCtx{}
	var err error
	if c.ns, err = netns.Get(); err != nil {
		return err
	}
	if c.nl, err = netlink.NewHandle(unix.NETLINK_ROUTE); err != nil {
		c.close()
		return err
	}
	if c.ethtool, err = ethtool.Socket(); err != nil {
		c.close()
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
	return parallel(ctx, order, func(n *Node) error {
		h := b.nodes[n].nl
		for _, l := range byNode[n] {
			veth := &netlink.Veth{
				LinkAttrs:        netlink.LinkAttrs{Name: l.A.Name, MTU: l.MTU, TxQLen: -1, HardwareAddr: l.A.MAC()},
				PeerName:         l.B.Name,
				PeerHardwareAddr: l.B.MAC(),
				PeerMTU:          uint32(l.MTU),
				PeerTxQLen:       -1,
				PeerNamespace:    netlink.NsFd(b.nodes[l.B.Node].ns),
			}
			if err := h.LinkAdd(veth); err != nil {
				return fmt.Errorf("link %s – %s: %w", l.A.Label(), l.B.Label(), err)
			}
		}
		return nil
	})
}

// configure brings n's interfaces up with offloads off, numbers them,
// installs routes and gives every egress port its queue.
func (b *build) configure(n *Node) error {
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
		link, err := h.LinkByName(i.Name)
		if err != nil {
			return fmt.Errorf("%s: %w", i.Label(), err)
		}
		index[i] = link.Attrs().Index
		if !i.Link.Offloads {
			if err := ethtool.SetOffloads(c.ethtool, i.Name, ethtool.Offloads{}); err != nil {
				return fmt.Errorf("%s: %w", i.Label(), err)
			}
			// With GSO off TCP still builds multi-segment skbs, and they
			// are only split after the qdisc: the queue and its markers
			// would see 5-7 KB packets. One segment per skb makes every
			// queued packet a wire packet.
			if err := h.LinkSetGSOMaxSegs(link, 1); err != nil {
				return fmt.Errorf("%s: gso_max_segs: %w", i.Label(), err)
			}
		}
		addr := &netlink.Addr{IPNet: hostNet(i.Local), Peer: hostNet(i.PeerAddr)}
		if err := h.AddrAdd(link, addr); err != nil {
			return fmt.Errorf("%s: address %s peer %s: %w", i.Label(), i.Local, i.PeerAddr, err)
		}
		neigh := &netlink.Neigh{LinkIndex: link.Attrs().Index, Family: netlink.FAMILY_V4, State: netlink.NUD_PERMANENT,
			IP: net.IP(i.PeerAddr.AsSlice()), HardwareAddr: i.Peer.MAC()}
		if err := h.NeighAdd(neigh); err != nil {
			return fmt.Errorf("%s: neighbour %s: %w", i.Label(), i.PeerAddr, err)
		}
		if err := h.LinkSetUp(link); err != nil {
			return fmt.Errorf("%s: up: %w", i.Label(), err)
		}
	}
	if n.Kind == Host {
		gw := n.Ifaces[0]
		r := &netlink.Route{LinkIndex: index[gw], Gw: net.IP(gw.PeerAddr.AsSlice()), Dst: nil}
		if err := h.RouteAdd(r); err != nil {
			return fmt.Errorf("%s: default route via %s: %w", n.Name, gw.PeerAddr, err)
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
	if err := tc.ApplyNode(context.Background(), ports); err != nil {
		return fmt.Errorf("%s: queues: %w", n.Name, err)
	}
	return nil
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

// Ports lists every egress port of the lab with its resolved settings:
// switch ports first, then host NICs, in node order.
func (l *Lab) Ports() ([]PortInfo, error) {
	var out []PortInfo
	for _, kind := range []NodeKind{Switch, Host} {
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

// Down removes everything lab made, from its state file when there is one
// and by name and label otherwise, so it also cleans up after an `up` that
// was killed part-way. Removing a lab that does not exist is not an error.
func Down(ctx context.Context, lab string) error {
	// Pacers first, while their NICs exist to be restored.
	errs := []error{stopPacers(lab)}
	st, _ := ReadState(lab)
	// Hosts of other runtimes first: removing a container ends its
	// processes the runtime's way.
	refs := map[string]HostRef{}
	if st != nil {
		for _, r := range st.Hosts {
			refs[r.Node] = r
		}
	}
	for _, name := range RuntimeNames() {
		rt, _ := Runtime(name)
		left, err := rt.Leftovers(ctx, lab)
		errs = append(errs, err)
		for _, r := range left {
			refs[r.Node] = r
		}
	}
	for _, r := range refs {
		if rt, err := Runtime(r.Runtime); err == nil {
			if err := rt.Remove(ctx, r); err != nil {
				errs = append(errs, fmt.Errorf("host %s: %w", r.Node, err))
			}
		}
	}
	paths, err := labNetNS(lab)
	errs = append(errs, err)
	// Processes still inside the lab (endpoints, `fabric exec`) would keep
	// its namespaces, and their links, alive after the unmount.
	ids := map[nsID]bool{}
	for _, p := range paths {
		if id, ok := statNS(p); ok {
			ids[id] = true
		}
	}
	if pids := processesIn(ids); len(pids) > 0 {
		signalAll(pids, unix.SIGTERM)
		deadline := time.Now().Add(2 * time.Second)
		for len(pids) > 0 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
			pids = processesIn(ids)
		}
		signalAll(pids, unix.SIGKILL)
	}
	errs = append(errs, parallel(ctx, paths, netnsutil.Remove))
	errs = append(errs, cc.Unregister(lab))
	errs = append(errs, tc.ForgetLab(lab)) // pinned maps under tc.BPFRoot/<lab>
	if err := os.RemoveAll(LabDir(lab)); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// DownAll removes every lab it can find: by state directory, by namespace
// name, by runtime label and by pinned BPF directory. It returns the labs
// it removed.
func DownAll(ctx context.Context) ([]string, error) {
	labs := map[string]bool{}
	names, err := List()
	for _, n := range names {
		labs[n] = true
	}
	paths, err2 := labNetNS("")
	for _, p := range paths {
		if l, ok := labOfNetNS(filepath.Base(p)); ok {
			labs[l] = true
		}
	}
	for _, name := range RuntimeNames() {
		rt, _ := Runtime(name)
		left, _ := rt.Leftovers(ctx, "")
		for _, r := range left {
			labs[r.Lab] = true
		}
	}
	pinned, _ := tc.ListLabs()
	for _, l := range pinned {
		labs[l] = true
	}
	errs := []error{err, err2}
	var done []string
	for _, l := range sortedKeys(labs) {
		if err := Down(ctx, l); err != nil {
			errs = append(errs, fmt.Errorf("lab %s: %w", l, err))
		}
		done = append(done, l)
	}
	return done, errors.Join(errs...)
}
