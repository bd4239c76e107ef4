package emu

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
)

// PingResult is the outcome of PingAll.
type PingResult struct {
	Hosts    []string
	Reached  map[string]map[string]bool // Reached[src][dst]
	Sent     int
	Received int
}

// Lost returns the pairs that did not answer, as "src->dst".
func (r *PingResult) Lost() []string {
	var out []string
	for _, s := range r.Hosts {
		for _, d := range r.Hosts {
			if s != d && !r.Reached[s][d] {
				out = append(out, s+"->"+d)
			}
		}
	}
	return out
}

// PingAll sends an ICMP echo from every host to every other host, the way
// Mininet's pingall does, and retries a silent pair a few times before
// counting it lost (the first packet of a pair may wait for ARP).
func (l *Lab) PingAll(ctx context.Context, timeout time.Duration) (*PingResult, error) {
	hosts := l.Graph.Hosts()
	res := &PingResult{Reached: map[string]map[string]bool{}}
	for _, h := range hosts {
		res.Hosts = append(res.Hosts, h.Name)
		res.Reached[h.Name] = map[string]bool{}
	}
	var mu sync.Mutex
	err := parallel(ctx, hosts, func(src *Node) error {
		got, err := l.pingFrom(ctx, src, hosts, timeout)
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		for _, dst := range hosts {
			if dst == src {
				continue
			}
			res.Sent++
			if got[dst.Addr] {
				res.Received++
				res.Reached[src.Name][dst.Name] = true
			}
		}
		return nil
	})
	return res, err
}

// pingFrom opens a raw ICMP socket inside src's namespace and pings every
// other host, up to three rounds for the ones that have not answered.
func (l *Lab) pingFrom(ctx context.Context, src *Node, hosts []*Node, timeout time.Duration) (map[netip.Addr]bool, error) {
	var conn *icmp.PacketConn
	err := l.Do(src.Name, func() error {
		var err error
		conn, err = icmp.ListenPacket("ip4:icmp", src.Addr.String())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%s: icmp socket: %w", src.Name, err)
	}
	defer conn.Close()
	// A raw socket sees only its own namespace's replies, so the process
	// ID is enough to tell ours from anyone else's pings there.
	id := os.Getpid() & 0xffff
	got := map[netip.Addr]bool{}
	for round := 0; round < 3 && len(got) < len(hosts)-1 && ctx.Err() == nil; round++ {
		for seq, dst := range hosts {
			if dst == src || got[dst.Addr] {
				continue
			}
			msg := icmp.Message{Type: ipv4.ICMPTypeEcho, Body: &icmp.Echo{ID: id, Seq: seq, Data: []byte("fabric pingall")}}
			b, _ := msg.Marshal(nil)
			if _, err := conn.WriteTo(b, &net.IPAddr{IP: net.IP(dst.Addr.AsSlice())}); err != nil {
				return nil, fmt.Errorf("%s -> %s: %w", src.Name, dst.Name, err)
			}
		}
		deadline := time.Now().Add(timeout)
		buf := make([]byte, 1500)
		for len(got) < len(hosts)-1 {
			conn.SetReadDeadline(deadline)
			n, peer, err := conn.ReadFrom(buf)
			if err != nil {
				break // deadline: next round
			}
			m, err := icmp.ParseMessage(1, buf[:n])
			if err != nil || m.Type != ipv4.ICMPTypeEchoReply {
				continue
			}
			if e, ok := m.Body.(*icmp.Echo); ok && e.ID == id {
				if a, ok := netipFrom(peer); ok {
					got[a] = true
				}
			}
		}
	}
	return got, nil
}

func netipFrom(a net.Addr) (netip.Addr, bool) {
	ip, ok := a.(*net.IPAddr)
	if !ok {
		return netip.Addr{}, false
	}
	return netip.AddrFromSlice(ip.IP.To4())
}
