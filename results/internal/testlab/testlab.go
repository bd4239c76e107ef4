// Package testlab builds a small routed lab for results' privileged tests
// and benchmarks: N sender namespaces and one receiver, each joined by a
// veth to a router namespace whose receiver-facing port is shaped by an HTB
// class with a bfifo leaf, the way fabric shapes a switch port.
//
// It exists so the LMM's accuracy test depends on nothing but the kernel;
// every resource is named with a random "fab.tlmm<hex>." prefix and removed
// by t.Cleanup. No address, route or interface is created in the root
// namespace: veths are created by a netlink handle inside the router
// namespace with their peer placed directly in the host namespace.
package testlab

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"os"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"fabric/internal/ethtool"
	"fabric/internal/netnsutil"
	"fabric/results/capture"
)

// Node is one namespace of the lab.
type Node struct {
	Name string // namespace name
	Path string // /run/netns/<Name>
	Addr netip.Addr
	ns   netns.NsHandle
}

// Lab is the built lab.
type Lab struct {
	Prefix     string
	Router     *Node
	Senders    []*Node
	Receiver   *Node
	ShapedIf   string // router interface facing the receiver (the shaped port)
	SenderIfs  []string
	RateBPS    uint64
	BurstBytes uint32 // the HTB class's burst (bucket size)
}

// Spec sizes the lab.
type Spec struct {
	Senders int
	RateBPS uint64 // HTB rate of the router's receiver-facing port
	// BurstBytes is the HTB class's burst; 0 means 1600, the smallest
	// burst tc itself uses (one MTU plus headroom). HTB sends while its
	// bucket is not negative, so 1600 B lets two full frames through back
	// to back before the rate applies.
	BurstBytes uint32
}

// New builds the lab and registers its removal with t.Cleanup.
func New(t testing.TB, spec Spec) *Lab {
	t.Helper()
	if spec.BurstBytes == 0 {
		spec.BurstBytes = 1600
	}
	var rnd [3]byte
	rand.Read(rnd[:])
	l := &Lab{Prefix: "fab.tlmm" + hex.EncodeToString(rnd[:]) + ".", RateBPS: spec.RateBPS, BurstBytes: spec.BurstBytes}
	var all []*Node
	t.Cleanup(func() {
		for _, n := range all {
			n.ns.Close()
			netns.DeleteNamed(n.Name)
		}
	})
	mk := func(short string) *Node {
		n, err := newNode(l.Prefix + short)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, n)
		return n
	}
	l.Router = mk("r")
	for i := 0; i < spec.Senders; i++ {
		l.Senders = append(l.Senders, mk(fmt.Sprintf("s%d", i)))
	}
	l.Receiver = mk("rx")
	rh, err := netlink.NewHandleAt(l.Router.ns)
	if err != nil {
		t.Fatal(err)
	}
	defer rh.Close()
	hosts := append(append([]*Node{}, l.Senders...), l.Receiver)
	for i, h := range hosts {
		rif := fmt.Sprintf("eth%d", i+1)
		subnet := i + 1
		if h == l.Receiver {
			subnet = 100
		}
		h.Addr = netip.AddrFrom4([4]byte{10, 9, byte(subnet), 2})
		gw := netip.AddrFrom4([4]byte{10, 9, byte(subnet), 1})
		if err := l.link(rh, rif, gw, h); err != nil {
			t.Fatal(err)
		}
		if h == l.Receiver {
			l.ShapedIf = rif
		} else {
			l.SenderIfs = append(l.SenderIfs, rif)
		}
	}
	if err := sysctl(l.Router.Path, "net/ipv4/ip_forward", "1"); err != nil {
		t.Fatal(err)
	}
	if err := shape(rh, l.ShapedIf, spec.RateBPS, spec.BurstBytes); err != nil {
		t.Fatal(err)
	}
	return l
}

func newNode(name string) (*Node, error) {
	n := &Node{Name: name, Path: "/run/netns/" + name}
	err := netnsutil.Create(n.Path, func() (err error) {
		n.ns, err = netns.Get()
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("create netns %s: %w", name, err)
	}
	// No IPv6: its router solicitations and MLD reports would be noise in
	// the captures.
	for _, k := range []string{"net/ipv6/conf/all/disable_ipv6", "net/ipv6/conf/default/disable_ipv6"} {
		if err := sysctl(n.Path, k, "1"); err != nil {
			return n, err
		}
	}
	return n, nil
}

// sysctl writes a per-namespace sysctl from inside the namespace: /proc/sys/net
// resolves to the namespace of the thread that opens it.
func sysctl(nsPath, key, value string) error {
	return netnsutil.Do(nsPath, func() error {
		return os.WriteFile("/proc/sys/"+key, []byte(value), 0o644)
	})
}

// link joins the router's rif (address gw/24) to host h's eth0 (h.Addr/24),
// with offloads off, static neighbours and the host's default route.
func (l *Lab) link(rh *netlink.Handle, rif string, gw netip.Addr, h *Node) error {
	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: rif, MTU: 1500, TxQLen: 1000},
		PeerName:      "eth0",
		PeerNamespace: netlink.NsFd(int(h.ns)),
	}
	if err := rh.LinkAdd(veth); err != nil {
		return fmt.Errorf("veth %s%s:%s: %w", l.Prefix, "r", rif, err)
	}
	hh, err := netlink.NewHandleAt(h.ns)
	if err != nil {
		return err
	}
	defer hh.Close()
	rl, err := rh.LinkByName(rif)
	if err != nil {
		return err
	}
	hl, err := hh.LinkByName("eth0")
	if err != nil {
		return err
	}
	for _, e := range []struct {
		hd   *netlink.Handle
		link netlink.Link
		addr netip.Addr
		path string
		peer netlink.Link
		pa   netip.Addr
	}{{rh, rl, gw, l.Router.Path, hl, h.Addr}, {hh, hl, h.Addr, h.Path, rl, gw}} {
		a := &netlink.Addr{IPNet: &net.IPNet{IP: e.addr.AsSlice(), Mask: net.CIDRMask(24, 32)}}
		if err := e.hd.AddrAdd(e.link, a); err != nil {
			return fmt.Errorf("address %s on %s: %w", e.addr, e.link.Attrs().Name, err)
		}
		if err := offloadsOff(e.path, e.link.Attrs().Name); err != nil {
			return err
		}
		if err := e.hd.LinkSetUp(e.link); err != nil {
			return err
		}
		// Permanent neighbours: an ARP exchange in the middle of a burst
		// would hold its first packet back and spoil the measurement.
		if err := e.hd.NeighAdd(&netlink.Neigh{
			LinkIndex: e.link.Attrs().Index, State: netlink.NUD_PERMANENT,
			IP: e.pa.AsSlice(), HardwareAddr: e.peer.Attrs().HardwareAddr, Family: unix.AF_INET,
		}); err != nil {
			return fmt.Errorf("neighbour %s: %w", e.pa, err)
		}
	}
	gwIP := gw.AsSlice()
	if err := hh.RouteAdd(&netlink.Route{LinkIndex: hl.Attrs().Index, Gw: gwIP}); err != nil {
		return fmt.Errorf("default route in %s: %w", h.Name, err)
	}
	return nil
}

func offloadsOff(nsPath, ifname string) error {
	return netnsutil.Do(nsPath, func() error {
		fd, err := ethtool.Socket()
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		return ethtool.SetOffloads(fd, ifname, ethtool.Offloads{})
	})
}

// shape puts HTB root 1: → class 1:1 (rate = ceil = rateBPS) → bfifo 10: on
// ifname. The bfifo keeps the kernel's default limit (txqueuelen × MTU,
// 1.5 MB), deep enough that the tests' bursts never drop.
func shape(h *netlink.Handle, ifname string, rateBPS uint64, burst uint32) error {
	link, err := h.LinkByName(ifname)
	if err != nil {
		return err
	}
	idx := link.Attrs().Index
	root := netlink.NewHtb(netlink.QdiscAttrs{LinkIndex: idx, Handle: netlink.MakeHandle(1, 0), Parent: netlink.HANDLE_ROOT})
	root.Defcls = 1
	if err := h.QdiscAdd(root); err != nil {
		return fmt.Errorf("htb on %s: %w", ifname, err)
	}
	class := netlink.NewHtbClass(
		netlink.ClassAttrs{LinkIndex: idx, Parent: netlink.MakeHandle(1, 0), Handle: netlink.MakeHandle(1, 1)},
		netlink.HtbClassAttrs{Rate: rateBPS, Ceil: rateBPS, Buffer: burst, Cbuffer: burst},
	)
	if err := h.ClassAdd(class); err != nil {
		return fmt.Errorf("htb class on %s: %w", ifname, err)
	}
	leaf := &netlink.GenericQdisc{
		QdiscAttrs: netlink.QdiscAttrs{LinkIndex: idx, Handle: netlink.MakeHandle(10, 0), Parent: netlink.MakeHandle(1, 1)},
		QdiscType:  "bfifo",
	}
	if err := h.QdiscAdd(leaf); err != nil {
		return fmt.Errorf("bfifo on %s: %w", ifname, err)
	}
	return nil
}

// DialUDP opens a UDP socket in sender i connected to the receiver's port.
func (l *Lab) DialUDP(i int, port int) (*net.UDPConn, error) {
	var c *net.UDPConn
	err := netnsutil.Do(l.Senders[i].Path, func() error {
		var err error
		c, err = net.DialUDP("udp4", nil, &net.UDPAddr{IP: l.Receiver.Addr.AsSlice(), Port: port})
		return err
	})
	return c, err
}

// ListenUDP opens a UDP socket on the receiver; reading it keeps the
// receiver from answering with ICMP port-unreachable.
func (l *Lab) ListenUDP(port int) (*net.UDPConn, error) {
	var c *net.UDPConn
	err := netnsutil.Do(l.Receiver.Path, func() error {
		var err error
		c, err = net.ListenUDP("udp4", &net.UDPAddr{Port: port})
		return err
	})
	return c, err
}

// Listen opens a TCP listener on the receiver.
func (l *Lab) Listen(port int) (net.Listener, error) {
	var ln net.Listener
	err := netnsutil.Do(l.Receiver.Path, func() error {
		var err error
		ln, err = net.Listen("tcp4", fmt.Sprintf(":%d", port))
		return err
	})
	return ln, err
}

// DialTCP connects sender i to the receiver's TCP port.
func (l *Lab) DialTCP(i int, port int) (net.Conn, error) {
	var c net.Conn
	err := netnsutil.Do(l.Senders[i].Path, func() error {
		var err error
		c, err = net.Dial("tcp4", net.JoinHostPort(l.Receiver.Addr.String(), fmt.Sprint(port)))
		return err
	})
	return c, err
}

// Point is a capture point on a router interface.
func (l *Lab) Point(ifname string) capture.Point {
	return capture.Point{NetNS: l.Router.Path, Ifname: ifname, Label: "r:" + ifname}
}
