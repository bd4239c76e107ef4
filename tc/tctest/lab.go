// Package tctest builds small labs of real network namespaces for the
// tests of package tc and of the `fabric port` commands, and generates
// real TCP and UDP traffic inside them with plain Go sockets.
//
// A Lab is an nstest.Star (host namespaces linked to one router namespace
// "r", at /run/netns/fab.<lab>.<node>, the layout emu uses, so commands
// that resolve ports by lab name work on them) with the tc targets of its
// ports. Every name carries the test's random lab name and t.Cleanup
// deletes all of it, including what package tc pinned for the lab.
package tctest

import (
	"testing"

	"github.com/fabric-emu/fabric/internal/nstest"
	"github.com/fabric-emu/fabric/tc"
)

// Router is the node every host links to.
const Router = nstest.Router

// Lab is a star of hosts around Router.
type Lab struct {
	*nstest.Star
	t testing.TB
}

// NewStar makes Router and one host per name, as nstest.New describes:
// host side "eth0" (10.3.i.2/24), router side "<host>" (10.3.i.1/24).
func NewStar(t testing.TB, hosts ...string) *Lab {
	t.Helper()
	return NewStarMTU(t, 0, hosts...)
}

// NewStarMTU is NewStar with every link at mtu bytes (0: 1500).
func NewStarMTU(t testing.TB, mtu int, hosts ...string) *Lab {
	t.Helper()
	return newStar(t, nstest.Options{Name: nstest.LabName("t3"), MTU: mtu}, hosts...)
}

// NewQuietStar is NewStar with lab names starting with prefix and IPv6 off
// in every namespace, so that nothing but the test's own traffic (no
// router solicitation, no MLD report) crosses a port whose packets the
// test counts.
func NewQuietStar(t testing.TB, prefix string, hosts ...string) *Lab {
	t.Helper()
	return newStar(t, nstest.Options{Name: nstest.LabName(prefix), NoIPv6: true}, hosts...)
}

func newStar(t testing.TB, opt nstest.Options, hosts ...string) *Lab {
	t.Helper()
	name := opt.Name
	// Registered first, so it runs last: after the namespaces are gone,
	// as emu's Down forgets a lab.
	t.Cleanup(func() {
		if err := tc.ForgetLab(name); err != nil {
			t.Logf("forget lab %s: %v", name, err)
		}
	})
	return &Lab{Star: nstest.New(t, opt, hosts...), t: t}
}

// Egress is the router port that sends to host (its peer is host's eth0).
func (l *Lab) Egress(host string) tc.Target {
	return tc.Target{
		Lab: l.Name, Node: Router, Ifname: l.Port(host), NetNS: l.NetNS(Router),
		PeerNode: host, PeerIfname: "eth0", PeerNetNS: l.NetNS(host),
	}
}
