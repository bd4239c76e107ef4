// Package testlab builds a small routed lab for results' privileged tests
// and benchmarks: N sender namespaces and one receiver around a router
// namespace (an nstest.Star with IPv6 off), whose receiver-facing port is
// shaped by an HTB class with a bfifo leaf, the way fabric shapes a switch
// port.
//
// It shapes with raw netlink, not through package tc, so that the LMM's
// accuracy test depends on nothing but the kernel; every namespace is named
// "fab.tlmm<hex>.<node>" and removed by t.Cleanup, and nothing is created
// in the root namespace (see nstest).
package testlab

import (
	"fmt"
	"net"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/fabric-emu/fabric/internal/nstest"
	"github.com/fabric-emu/fabric/results/capture"
)

// Receiver is the receiving host's node name.
const Receiver = "rx"

// Lab is the built lab.
type Lab struct {
	*nstest.Star
	Senders    []string // sender nodes: s0, s1, …
	ShapedIf   string   // router interface facing the receiver (the shaped port)
	SenderIfs  []string // router interfaces facing the senders
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
	l := &Lab{RateBPS: spec.RateBPS, BurstBytes: spec.BurstBytes}
	for i := 0; i < spec.Senders; i++ {
		l.Senders = append(l.Senders, fmt.Sprintf("s%d", i))
	}
	// No IPv6: its router solicitations and MLD reports would be noise in
	// the captures.
	l.Star = nstest.New(t, nstest.Options{Name: nstest.LabName("tlmm"), NoIPv6: true}, append(l.Senders, Receiver)...)
	for _, s := range l.Senders {
		l.SenderIfs = append(l.SenderIfs, l.Port(s))
	}
	l.ShapedIf = l.Port(Receiver)
	if err := shape(l.Handle(nstest.Router), l.ShapedIf, spec.RateBPS, spec.BurstBytes); err != nil {
		t.Fatal(err)
	}
	return l
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
	return open(l, l.Senders[i], func() (*net.UDPConn, error) {
		return net.DialUDP("udp4", nil, &net.UDPAddr{IP: l.Addr(Receiver).AsSlice(), Port: port})
	})
}

// ListenUDP opens a UDP socket on the receiver; reading it keeps the
// receiver from answering with ICMP port-unreachable.
func (l *Lab) ListenUDP(port int) (*net.UDPConn, error) {
	return open(l, Receiver, func() (*net.UDPConn, error) {
		return net.ListenUDP("udp4", &net.UDPAddr{Port: port})
	})
}

// Listen opens a TCP listener on the receiver.
func (l *Lab) Listen(port int) (net.Listener, error) {
	return open(l, Receiver, func() (net.Listener, error) {
		return net.Listen("tcp4", fmt.Sprintf(":%d", port))
	})
}

// DialTCP connects sender i to the receiver's TCP port.
func (l *Lab) DialTCP(i int, port int) (net.Conn, error) {
	return open(l, l.Senders[i], func() (net.Conn, error) {
		return net.Dial("tcp4", net.JoinHostPort(l.Addr(Receiver).String(), fmt.Sprint(port)))
	})
}

// open runs fn inside node's namespace; the socket it opens stays there.
func open[T any](l *Lab, node string, fn func() (T, error)) (T, error) {
	var c T
	err := l.Do(node, func() (err error) {
		c, err = fn()
		return err
	})
	return c, err
}

// Point is a capture point on a router interface.
func (l *Lab) Point(ifname string) capture.Point {
	return capture.Point{NetNS: l.NetNS(nstest.Router), Ifname: ifname, Label: nstest.Router + ":" + ifname}
}
