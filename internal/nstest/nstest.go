// Package nstest builds star labs of real network namespaces for
// privileged tests: a router namespace Router and one namespace per host,
// each host joined to the router by a veth. It is the one fixture behind
// tc/tctest (package tc's tests) and results/internal/testlab (results'
// tests), and imports neither tc nor results, so a test built on it alone
// depends on nothing but the kernel.
//
// Namespaces are bind-mounted at /run/netns/fab.<lab>.<node>, the layout
// emu uses, so commands that resolve ports by lab name work on them. The
// lab name is random per test and t.Cleanup removes every namespace, and
// with it every interface. Nothing is created in the root namespace: each
// veth is made by a netlink handle inside the router namespace with its
// peer placed directly in the host's.
package nstest

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/fabric-emu/fabric/internal/ethtool"
	"github.com/fabric-emu/fabric/internal/netnsutil"
)

// Router is the node every host links to.
const Router = "r"

// Options tune a lab.
type Options struct {
	// Name is the lab name; "" means LabName("t").
	Name string
	// NoIPv6 disables IPv6 in every namespace before its links exist, so
	// no router solicitation or MLD report ever crosses a link.
	NoIPv6 bool
	// MTU of every link; 0 means 1500.
	MTU int
}

// LabName is a random lab name: prefix and six hex digits.
func LabName(prefix string) string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// Star is a lab of hosts around Router.
type Star struct {
	Name  string
	t     testing.TB
	mtu   int
	nodes map[string]*node
	made  []string              // nodes in creation order, for cleanup
	addr  map[string]netip.Addr // host → its address
}

type node struct {
	ns      netns.NsHandle
	nl      *netlink.Handle
	ethtool int // ethtool socket inside the namespace
}

// New makes Router and one host per name, each host linked to the router
// by a veth: host side "eth0" (10.3.i.2/24, default route via the router),
// router side named as the host (10.3.i.1/24), for the i-th host from 1.
// Both ends have offloads off, as emu's lab links, and a permanent
// neighbour entry for the other; the router forwards IPv4.
func New(t testing.TB, opt Options, hosts ...string) *Star {
	t.Helper()
	if opt.Name == "" {
		opt.Name = LabName("t")
	}
	if opt.MTU == 0 {
		opt.MTU = 1500
	}
	s := &Star{Name: opt.Name, t: t, mtu: opt.MTU, nodes: map[string]*node{}, addr: map[string]netip.Addr{}}
	t.Cleanup(s.destroy)
	var common [][2]string
	if opt.NoIPv6 {
		common = [][2]string{{"net/ipv6/conf/all/disable_ipv6", "1"}, {"net/ipv6/conf/default/disable_ipv6", "1"}}
	}
	if err := s.addNode(Router, append([][2]string{{"net/ipv4/ip_forward", "1"}}, common...)); err != nil {
		t.Fatal(err)
	}
	for i, h := range hosts {
		if err := s.addNode(h, common); err != nil {
			t.Fatal(err)
		}
		if err := s.link(h, i+1); err != nil {
			t.Fatalf("link %s: %v", h, err)
		}
	}
	return s
}

// NetNS is the namespace file of node.
func (s *Star) NetNS(node string) string { return netnsutil.Path(s.Name, node) }

func (s *Star) nsName(node string) string { return netnsutil.Name(s.Name, node) }

// Addr is host's address.
func (s *Star) Addr(host string) netip.Addr { return s.addr[host] }

// Port is the router's interface toward host.
func (s *Star) Port(host string) string { return host }

// Handle is a netlink handle inside node's namespace, open until cleanup.
func (s *Star) Handle(node string) *netlink.Handle {
	s.t.Helper()
	n, ok := s.nodes[node]
	if !ok {
		s.t.Fatalf("lab %s has no node %q", s.Name, node)
	}
	return n.nl
}

// Do runs fn on an OS thread inside node's namespace. Sockets fn opens
// stay in that namespace after Do returns.
func (s *Star) Do(node string, fn func() error) error {
	n, ok := s.nodes[node]
	if !ok {
		return fmt.Errorf("lab %s has no node %q", s.Name, node)
	}
	return netnsutil.DoHandle(n.ns, s.nsName(node), fn)
}

// Sysctl sets a /proc/sys value (e.g. "net/ipv4/tcp_ecn") in node.
func (s *Star) Sysctl(node, key, value string) {
	s.t.Helper()
	if err := s.Do(node, func() error { return writeSysctl(key, value) }); err != nil {
		s.t.Fatalf("sysctl %s=%s in %s: %v", key, value, node, err)
	}
}

// writeSysctl writes /proc/sys/key, which resolves to the namespace of the
// calling thread.
func writeSysctl(key, value string) error {
	return os.WriteFile("/proc/sys/"+key, []byte(value), 0o644)
}

// addNode creates node's namespace and, from inside it, sets sysctls and
// opens the ethtool socket; then brings lo up.
func (s *Star) addNode(name string, sysctls [][2]string) error {
	n := &node{ethtool: -1}
	path := s.NetNS(name)
	err := netnsutil.Create(path, func() (err error) {
		for _, kv := range sysctls {
			if err := writeSysctl(kv[0], kv[1]); err != nil {
				return err
			}
		}
		if n.ethtool, err = ethtool.Socket(); err != nil {
			return err
		}
		n.ns, err = netns.Get()
		return err
	})
	if !errors.Is(err, os.ErrExist) { // not someone else's namespace
		s.made = append(s.made, name)
	}
	if err != nil {
		if n.ethtool >= 0 {
			unix.Close(n.ethtool)
		}
		return fmt.Errorf("namespace %s: %w", s.nsName(name), err)
	}
	s.nodes[name] = n
	if n.nl, err = netlink.NewHandleAt(n.ns); err != nil {
		return err
	}
	lo, err := n.nl.LinkByName("lo")
	if err == nil {
		err = n.nl.LinkSetUp(lo)
	}
	return err
}

// link makes the veth between Router and host, the i-th host.
func (s *Star) link(host string, i int) error {
	r, h := s.nodes[Router], s.nodes[host]
	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: s.Port(host), MTU: s.mtu, TxQLen: 1000},
		PeerName:      "eth0",
		PeerNamespace: netlink.NsFd(h.ns),
	}
	if err := r.nl.LinkAdd(veth); err != nil {
		return fmt.Errorf("veth %s:%s-%s:eth0: %w", Router, s.Port(host), host, err)
	}
	rl, err := r.nl.LinkByName(s.Port(host))
	if err != nil {
		return err
	}
	hl, err := h.nl.LinkByName("eth0")
	if err != nil {
		return err
	}
	rAddr := netip.AddrFrom4([4]byte{10, 3, byte(i), 1})
	hAddr := netip.AddrFrom4([4]byte{10, 3, byte(i), 2})
	s.addr[host] = hAddr
	for _, e := range []struct {
		n          *node
		link, peer netlink.Link
		a, pa      netip.Addr
	}{{r, rl, hl, rAddr, hAddr}, {h, hl, rl, hAddr, rAddr}} {
		name := e.link.Attrs().Name
		if err := ethtool.SetOffloads(e.n.ethtool, name, ethtool.Offloads{}); err != nil {
			return fmt.Errorf("offloads of %s: %w", name, err)
		}
		a := &netlink.Addr{IPNet: &net.IPNet{IP: e.a.AsSlice(), Mask: net.CIDRMask(24, 32)}}
		if err := e.n.nl.AddrAdd(e.link, a); err != nil {
			return fmt.Errorf("address %s on %s: %w", e.a, name, err)
		}
		// Permanent neighbours, for two reasons. The kernel's ARP table
		// is shared by every namespace on the machine and a large lab
		// elsewhere can fill it (gc_thresh3), after which new entries
		// fail with ENOBUFS; permanent entries are exempt. And an ARP
		// exchange in the middle of a burst would hold its first packet
		// back and spoil a measurement.
		if err := e.n.nl.NeighSet(&netlink.Neigh{
			LinkIndex: e.link.Attrs().Index, Family: unix.AF_INET, State: netlink.NUD_PERMANENT,
			IP: e.pa.AsSlice(), HardwareAddr: e.peer.Attrs().HardwareAddr,
		}); err != nil {
			return fmt.Errorf("neighbour %s on %s: %w", e.pa, name, err)
		}
		if err := e.n.nl.LinkSetUp(e.link); err != nil {
			return err
		}
	}
	if err := h.nl.RouteAdd(&netlink.Route{LinkIndex: hl.Attrs().Index, Gw: rAddr.AsSlice()}); err != nil {
		return fmt.Errorf("default route in %s: %w", host, err)
	}
	return nil
}

func (s *Star) destroy() {
	for _, n := range s.nodes {
		if n.nl != nil {
			n.nl.Close()
		}
		unix.Close(n.ethtool)
		n.ns.Close()
	}
	for _, name := range s.made {
		if err := netnsutil.Remove(s.NetNS(name)); err != nil {
			s.t.Logf("remove namespace %s: %v", s.nsName(name), err)
		}
	}
}
