// Package cctest builds the smallest network on which a congestion control
// can be watched: two fresh network namespaces joined by one veth, with ECN
// on and offloads off, plus a random CE marker. It serves the privileged
// tests of hosts/cc and tc/pacer; labs are built by emu, not by this.
//
// Everything it creates is named fab.t<tag><pid>.{a,b} and removed by
// t.Cleanup. No address or route is added outside the two namespaces.
package cctest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fabric-emu/fabric/internal/netnsutil"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/fabric-emu/fabric/internal/ethtool"
)

// Host is one end of a Pair.
type Host struct {
	NSName string // under /run/netns
	NS     netns.NsHandle
	If     string // the veth end inside NS
	Addr   net.IP
	Handle *netlink.Handle // netlink inside NS
}

// Pair is two hosts on one veth: A (10.99.0.1) and B (10.99.0.2). The
// addresses exist only inside the pair's namespaces.
type Pair struct {
	A, B *Host
}

// NewPair creates the namespaces and the veth, sets net.ipv4.tcp_ecn=1 in
// both, turns TSO/GSO/GRO off (so queues see real packets) and removes it
// all when t ends. tag (a few letters) keeps names unique per test.
func NewPair(t testing.TB, tag string) *Pair {
	t.Helper()
	lab := fmt.Sprintf("t%s%d", tag, os.Getpid())
	p := &Pair{
		A: &Host{NSName: netnsutil.Name(lab, "a"), If: "eth0", Addr: net.IPv4(10, 99, 0, 1)},
		B: &Host{NSName: netnsutil.Name(lab, "b"), If: "eth0", Addr: net.IPv4(10, 99, 0, 2)},
	}
	for _, h := range []*Host{p.A, p.B} {
		t.Cleanup(func() {
			if h.NS.IsOpen() {
				h.NS.Close()
			}
			if err := netnsutil.Remove(h.Path()); err != nil {
				t.Errorf("deleting namespace %s: %v", h.NSName, err)
			}
		})
		if err := netnsutil.Create(h.Path(), func() error { return nil }); err != nil {
			t.Fatal(err)
		}
		ns, err := netns.GetFromPath(h.Path())
		if err != nil {
			t.Fatal(err)
		}
		h.NS = ns
		hd, err := netlink.NewHandleAt(ns)
		if err != nil {
			t.Fatal(err)
		}
		h.Handle = hd
		t.Cleanup(hd.Close)
	}
	// Created inside A with its peer placed straight into B: at no point
	// does either end live in the root namespace.
	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: p.A.If, MTU: 1500},
		PeerName:      p.B.If,
		PeerNamespace: netlink.NsFd(int(p.B.NS)),
	}
	if err := p.A.Handle.LinkAdd(veth); err != nil {
		t.Fatalf("veth %s<->%s: %v", p.A.NSName, p.B.NSName, err)
	}
	for _, h := range []*Host{p.A, p.B} {
		if err := h.setup(); err != nil {
			t.Fatal(err)
		}
	}
	for _, h := range []*Host{p.A, p.B} {
		if err := h.waitReady(5 * time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.A.neighbour(p.B); err != nil {
		t.Fatal(err)
	}
	if err := p.B.neighbour(p.A); err != nil {
		t.Fatal(err)
	}
	return p
}

// neighbour adds a permanent ARP entry for peer. The kernel's ARP table is
// shared by all namespaces and capped (gc_thresh3, 1024 by default); on a
// machine running many labs it overflows, ARP then fails silently and the
// first SYNs vanish. Permanent entries are exempt from that cap.
func (h *Host) neighbour(peer *Host) error {
	pl, err := peer.Handle.LinkByName(peer.If)
	if err != nil {
		return err
	}
	l, err := h.Handle.LinkByName(h.If)
	if err != nil {
		return err
	}
	n := &netlink.Neigh{
		LinkIndex:    l.Attrs().Index,
		State:        netlink.NUD_PERMANENT,
		IP:           peer.Addr,
		HardwareAddr: pl.Attrs().HardwareAddr,
	}
	if err := h.Handle.NeighSet(n); err != nil {
		return fmt.Errorf("%s: neighbour %s: %w", h.NSName, peer.Addr, err)
	}
	return nil
}

// waitReady waits until the kernel's link watcher has seen the carrier and
// given the veth its real qdisc. Until then (up to a second after the peer
// comes up) the device sits on noop_qdisc, which drops every packet: a
// connection attempted that early loses its SYN and waits for the 1 s
// retransmission.
func (h *Host) waitReady(limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		l, err := h.Handle.LinkByName(h.If)
		if err != nil {
			return err
		}
		if l.Attrs().OperState == netlink.OperUp {
			qs, err := h.Handle.QdiscList(l)
			if err != nil {
				return err
			}
			if len(qs) > 0 && qs[0].Type() != "noop" {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %s not ready after %v (operstate %v)", h.NSName, h.If, limit, l.Attrs().OperState)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (h *Host) setup() error {
	l, err := h.Handle.LinkByName(h.If)
	if err != nil {
		return fmt.Errorf("%s: %w", h.NSName, err)
	}
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: h.Addr, Mask: net.CIDRMask(24, 32)}}
	if err := h.Handle.AddrAdd(l, addr); err != nil {
		return fmt.Errorf("%s: address: %w", h.NSName, err)
	}
	// TSO/GSO off is not enough: TCP builds GSO super-packets regardless
	// (software-segmented after the qdisc), so HTB and tc programs would see
	// ~5–7 KB skbs. One segment per skb makes every queue see real packets.
	if err := h.Handle.LinkSetGSOMaxSegs(l, 1); err != nil {
		return fmt.Errorf("%s: gso_max_segs: %w", h.NSName, err)
	}
	for _, name := range []string{"lo", h.If} {
		ll, err := h.Handle.LinkByName(name)
		if err == nil {
			err = h.Handle.LinkSetUp(ll)
		}
		if err != nil {
			return fmt.Errorf("%s: up %s: %w", h.NSName, name, err)
		}
	}
	return h.Do(func() error {
		if err := os.WriteFile("/proc/sys/net/ipv4/tcp_ecn", []byte("1"), 0o644); err != nil {
			return fmt.Errorf("%s: tcp_ecn: %w", h.NSName, err)
		}
		fd, err := ethtool.Socket()
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		return ethtool.SetOffloads(fd, h.If, ethtool.Offloads{})
	})
}

// Path is the namespace's file, as other packages take it.
func (h *Host) Path() string { return filepath.Join(netnsutil.Dir, h.NSName) }

// Do runs fn on a thread inside the host's namespace. Sockets created by fn
// stay in that namespace when used from other goroutines.
func (h *Host) Do(fn func() error) error { return netnsutil.DoHandle(h.NS, h.NSName, fn) }

func withCC(cc string) func(network, address string, c syscall.RawConn) error {
	return func(_, _ string, c syscall.RawConn) error {
		if cc == "" {
			return nil
		}
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, cc)
		}); err != nil {
			return err
		}
		if serr != nil {
			return fmt.Errorf("setsockopt TCP_CONGESTION=%s: %w", cc, serr)
		}
		return nil
	}
}

// Listen opens a TCP listener on the host at port, using congestion control
// cc ("" for the namespace default); accepted connections inherit it.
func (h *Host) Listen(cc string, port int) (net.Listener, error) {
	var l net.Listener
	err := h.Do(func() error {
		var err error
		lc := net.ListenConfig{Control: withCC(cc)}
		l, err = lc.Listen(context.Background(), "tcp4", fmt.Sprintf("%s:%d", h.Addr, port))
		return err
	})
	return l, err
}

// Dial connects from the host to addr with congestion control cc.
func (h *Host) Dial(cc, addr string) (*net.TCPConn, error) {
	var c net.Conn
	err := h.Do(func() error {
		var err error
		d := net.Dialer{Control: withCC(cc), Timeout: 5 * time.Second}
		c, err = d.Dial("tcp4", addr)
		return err
	})
	if err != nil {
		return nil, err
	}
	return c.(*net.TCPConn), nil
}

// CongestionControl reports the congestion control a socket uses.
func CongestionControl(c syscall.Conn) (string, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return "", err
	}
	var name string
	var gerr error
	if err := rc.Control(func(fd uintptr) {
		name, gerr = unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION)
	}); err != nil {
		return "", err
	}
	return strings.TrimRight(name, "\x00"), gerr
}

// TCPInfo reads TCP_INFO of a socket.
func TCPInfo(c syscall.Conn) (*unix.TCPInfo, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var info *unix.TCPInfo
	var gerr error
	if err := rc.Control(func(fd uintptr) {
		info, gerr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); err != nil {
		return nil, err
	}
	return info, gerr
}

// Transfer is the outcome of one bulk flow from A to B.
type Transfer struct {
	Bytes      int64
	Elapsed    time.Duration
	SenderCC   string
	ReceiverCC string
	Sender     *unix.TCPInfo // at the end of the flow
}

// Mbps is the goodput.
func (x Transfer) Mbps() float64 { return float64(x.Bytes) * 8 / x.Elapsed.Seconds() / 1e6 }

// Send runs one TCP flow from A to B for d, both ends using cc, and
// returns what it measured. port must be free in B.
func (p *Pair) Send(cc string, port int, d time.Duration) (Transfer, error) {
	l, err := p.B.Listen(cc, port)
	if err != nil {
		return Transfer{}, err
	}
	defer l.Close()
	type recv struct {
		n   int64
		cc  string
		err error
	}
	got := make(chan recv, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			got <- recv{err: err}
			return
		}
		defer c.Close()
		name, _ := CongestionControl(c.(*net.TCPConn))
		n, err := io.Copy(io.Discard, c)
		got <- recv{n, name, err}
	}()
	c, err := p.A.Dial(cc, l.Addr().String())
	if err != nil {
		return Transfer{}, err
	}
	x := Transfer{}
	x.SenderCC, err = CongestionControl(c)
	if err != nil {
		c.Close()
		return Transfer{}, err
	}
	buf := make([]byte, 64<<10)
	start := time.Now()
	c.SetWriteDeadline(start.Add(d))
	for {
		if _, err := c.Write(buf); err != nil {
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				c.Close()
				return Transfer{}, fmt.Errorf("sending: %w", err)
			}
			break
		}
	}
	x.Sender, err = TCPInfo(c)
	c.Close()
	if err != nil {
		return Transfer{}, err
	}
	r := <-got
	if r.err != nil {
		return Transfer{}, fmt.Errorf("receiving: %w", r.err)
	}
	x.Elapsed = time.Since(start)
	x.Bytes = r.n
	x.ReceiverCC = r.cc
	return x, nil
}
