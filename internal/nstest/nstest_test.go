package nstest

import (
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/fabric-emu/fabric/internal/testenv"
)

// TestStar builds a lab, sends a datagram from one host to the other
// through the router, and checks that cleanup leaves nothing behind.
func TestStar(t *testing.T) {
	testenv.RequireRoot(t)
	rootLinks, err := netlink.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	t.Run("lab", func(t *testing.T) {
		s := New(t, Options{Name: LabName("tns"), NoIPv6: true}, "a", "b")
		for _, n := range []string{Router, "a", "b"} {
			p := s.NetNS(n)
			if !strings.HasPrefix(p, "/run/netns/fab."+s.Name+".") {
				t.Fatalf("namespace %s outside the lab's names", p)
			}
			if _, err := os.Stat(p); err != nil {
				t.Fatal(err)
			}
			paths = append(paths, p)
		}
		var rx *net.UDPConn
		if err := s.Do("b", func() (err error) {
			rx, err = net.ListenUDP("udp4", &net.UDPAddr{Port: 7000})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer rx.Close()
		var tx *net.UDPConn
		if err := s.Do("a", func() (err error) {
			tx, err = net.DialUDP("udp4", nil, &net.UDPAddr{IP: s.Addr("b").AsSlice(), Port: 7000})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer tx.Close()
		// A datagram every 100 ms until one arrives: UDP promises nothing,
		// and in CI one sent at once after bring-up was once lost (its
		// neighbour resolution still under way).
		sent := make(chan int, 1)
		stop := make(chan struct{})
		go func() {
			n := 0
			for {
				if _, err := tx.Write([]byte("hello")); err == nil {
					n++
				}
				select {
				case <-stop:
					sent <- n
					return
				case <-time.After(100 * time.Millisecond):
				}
			}
		}()
		rx.SetReadDeadline(time.Now().Add(3 * time.Second))
		buf := make([]byte, 16)
		n, from, err := rx.ReadFromUDP(buf)
		close(stop)
		t.Logf("a datagram arrived after %d sent", <-sent)
		if err != nil || string(buf[:n]) != "hello" || !from.IP.Equal(s.Addr("a").AsSlice()) {
			t.Fatalf("read %q from %v: %v", buf[:n], from, err)
		}
		if err := s.Do("a", func() error {
			b, err := os.ReadFile("/proc/sys/net/ipv6/conf/eth0/disable_ipv6")
			if err == nil && strings.TrimSpace(string(b)) != "1" {
				t.Errorf("IPv6 on in a: disable_ipv6=%s", b)
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
	})
	for _, p := range paths {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s left after cleanup: %v", p, err)
		}
	}
	// By name, not by count: other labs on the machine come and go.
	had := map[string]bool{}
	for _, l := range rootLinks {
		had[l.Attrs().Name] = true
	}
	after, err := netlink.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range after {
		if n := l.Attrs().Name; (n == "a" || n == "b") && !had[n] {
			t.Errorf("interface %s appeared in the root namespace", n)
		}
	}
}
