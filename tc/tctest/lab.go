// Package tctest builds small labs of real network namespaces for the
// tests of package tc and of the `fabric port` commands, and generates
// real TCP and UDP traffic inside them with plain Go sockets.
//
// A Lab is a star: host namespaces linked to one router namespace "r".
// Namespaces are bind-mounted at /run/netns/fab.<lab>.<node>, the layout
// emu uses, so commands that resolve ports by lab name work on them. Every
// name carries the test's random lab name and t.Cleanup deletes all of it.
package tctest

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
	"fabric/tc"
)

// Router is the node every host links to.
const Router = "r"

// Lab is a star of hosts around Router.
type Lab struct {
	Name  string
	t     testing.TB
	nodes map[string]netns.NsHandle
	hosts []string
	addr  map[string]netip.Addr // host → its address
}

// NewStar makes Router and one host per name, each host linked to the
// router by a veth: host side "eth0" (10.3.i.2/24, default route via the
// router), router side "<host>" (10.3.i.1/24). Offloads are off on both
// ends, as emu does for lab links.
func NewStar(t testing.TB, hosts ...string) *Lab {
	t.Helper()
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	l := &Lab{Name: "t3" + hex.EncodeToString(b), t: t, nodes: map[string]netns.NsHandle{}, addr: map[string]netip.Addr{}}
	t.Cleanup(l.destroy)
	l.addNode(Router)
	if err := l.sysctl(Router, "net/ipv4/ip_forward", "1"); err != nil {
		t.Fatal(err)
	}
	for i, h := range hosts {
		l.addNode(h)
		l.link(h, i+1)
		l.hosts = append(l.hosts, h)
	}
	return l
}

// NetNS is the namespace file of node.
func (l *Lab) NetNS(node string) string { return "/run/netns/" + l.nsName(node) }

func (l *Lab) nsName(node string) string { return "fab." + l.Name + "." + node }

// Addr is host's address.
func (l *Lab) Addr(host string) netip.Addr { return l.addr[host] }

// Egress is the router port that sends to host (its peer is host's eth0).
func (l *Lab) Egress(host string) tc.Target {
	return tc.Target{
		Lab: l.Name, Node: Router, Ifname: host, NetNS: l.NetNS(Router),
		PeerNode: host, PeerIfname: "eth0", PeerNetNS: l.NetNS(host),
	}
}

// NIC is host's own egress port toward the router.
func (l *Lab) NIC(host string) tc.Target {
	return tc.Target{
		Lab: l.Name, Node: host, Ifname: "eth0", NetNS: l.NetNS(host),
		PeerNode: Router, PeerIfname: host, PeerNetNS: l.NetNS(Router),
	}
}

func (l *Lab) addNode(node string) {
	l.t.Helper()
	var ns netns.NsHandle
	err := netnsutil.Create(l.NetNS(node), func() (err error) {
		ns, err = netns.Get()
		return err
	})
	if err != nil {
		l.t.Fatalf("namespace %s: %v", l.nsName(node), err)
	}
	l.nodes[node] = ns
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		l.t.Fatal(err)
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err == nil {
		err = h.LinkSetUp(lo)
	}
	if err != nil {
		l.t.Fatal(err)
	}
}

func (l *Lab) link(host string, i int) {
	l.t.Helper()
	hr, err := netlink.NewHandleAt(l.nodes[Router])
	if err != nil {
		l.t.Fatal(err)
	}
	defer hr.Close()
	hh, err := netlink.NewHandleAt(l.nodes[host])
	if err != nil {
		l.t.Fatal(err)
	}
	defer hh.Close()
	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: host, MTU: 1500, TxQLen: 1000},
		PeerName:      "eth0",
		PeerNamespace: netlink.NsFd(l.nodes[host]),
	}
	if err := hr.LinkAdd(veth); err != nil {
		l.t.Fatalf("veth r:%s-%s:eth0: %v", host, host, err)
	}
	rAddr := netip.AddrFrom4([4]byte{10, 3, byte(i), 1})
	hAddr := netip.AddrFrom4([4]byte{10, 3, byte(i), 2})
	l.addr[host] = hAddr
	for _, side := range []struct {
		h      *netlink.Handle
		node   string
		ifname string
		a      netip.Addr
	}{{hr, Router, host, rAddr}, {hh, host, "eth0", hAddr}} {
		link, err := side.h.LinkByName(side.ifname)
		if err != nil {
			l.t.Fatal(err)
		}
		addr, _ := netlink.ParseAddr(side.a.String() + "/24")
		if err := side.h.AddrAdd(link, addr); err != nil {
			l.t.Fatal(err)
		}
		if err := side.h.LinkSetUp(link); err != nil {
			l.t.Fatal(err)
		}
		if err := l.Do(side.node, func() error {
			fd, err := ethtool.Socket()
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			return ethtool.SetOffloads(fd, side.ifname, ethtool.Offloads{})
		}); err != nil {
			l.t.Fatal(err)
		}
	}
	// Permanent neighbours: the kernel's ARP table is shared by every
	// namespace on the machine and a large lab elsewhere can fill it
	// (gc_thresh3), after which new entries fail with ENOBUFS. Permanent
	// entries are exempt from that limit, and the lab knows every MAC.
	rl, _ := hr.LinkByName(host)
	link, _ := hh.LinkByName("eth0")
	for _, n := range []struct {
		h   *netlink.Handle
		on  netlink.Link
		ip  netip.Addr
		mac net.HardwareAddr
	}{{hr, rl, hAddr, link.Attrs().HardwareAddr}, {hh, link, rAddr, rl.Attrs().HardwareAddr}} {
		if err := n.h.NeighSet(&netlink.Neigh{
			LinkIndex: n.on.Attrs().Index, Family: unix.AF_INET, State: netlink.NUD_PERMANENT,
			IP: n.ip.AsSlice(), HardwareAddr: n.mac,
		}); err != nil {
			l.t.Fatalf("neighbour %s: %v", n.ip, err)
		}
	}
	gw := rAddr.AsSlice()
	if err := hh.RouteAdd(&netlink.Route{LinkIndex: link.Attrs().Index, Dst: nil, Gw: gw}); err != nil {
		l.t.Fatal(err)
	}
}

// Do runs fn on an OS thread inside node's namespace. Sockets fn opens
// stay in that namespace after Do returns.
func (l *Lab) Do(node string, fn func() error) error {
	ns, ok := l.nodes[node]
	if !ok {
		return fmt.Errorf("lab %s has no node %q", l.Name, node)
	}
	return netnsutil.DoHandle(ns, l.nsName(node), fn)
}

// Sysctl sets a /proc/sys/net value inside node's namespace.
func (l *Lab) sysctl(node, key, value string) error {
	return l.Do(node, func() error {
		return os.WriteFile("/proc/sys/"+key, []byte(value), 0o644)
	})
}

// Sysctl sets a /proc/sys value (e.g. "net/ipv4/tcp_ecn") in node.
func (l *Lab) Sysctl(node, key, value string) {
	l.t.Helper()
	if err := l.sysctl(node, key, value); err != nil {
		l.t.Fatalf("sysctl %s=%s in %s: %v", key, value, node, err)
	}
}

func (l *Lab) destroy() {
	for node, ns := range l.nodes {
		ns.Close()
		if err := netns.DeleteNamed(l.nsName(node)); err != nil {
			l.t.Logf("delete namespace %s: %v", l.nsName(node), err)
		}
	}
	if err := tc.ForgetLab(l.Name); err != nil {
		l.t.Logf("forget lab %s: %v", l.Name, err)
	}
}
