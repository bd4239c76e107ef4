package emu

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"
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
	err := parallel(ctx, hosts, func(ctx context.Context, src *Node) error {
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

// pingFrom pings every other host from src, up to three rounds for the
// ones that have not answered.
func (l *Lab) pingFrom(ctx context.Context, src *Node, hosts []*Node, timeout time.Duration) (map[netip.Addr]bool, error) {
	p, err := l.openPinger(src.Name)
	if err != nil {
		return nil, err
	}
	defer p.close()
	got := map[netip.Addr]bool{}
	for round := 0; round < 3 && len(got) < len(hosts)-1 && ctx.Err() == nil; round++ {
		for seq, dst := range hosts {
			if dst == src || got[dst.Addr] {
				continue
			}
			if _, err := p.send(dst.Addr, seq); err != nil {
				return nil, fmt.Errorf("%s -> %s: %w", src.Name, dst.Name, err)
			}
		}
		deadline := time.Now().Add(timeout)
		for len(got) < len(hosts)-1 {
			from, _, _, ok := p.recv(deadline)
			if !ok {
				break // deadline: next round
			}
			got[from] = true
		}
	}
	return got, nil
}

// RTT pings dst from src count times, one echo at a time, and returns each
// round trip (an echo unanswered within a second is left out). The lab
// measures its unloaded RTT this way before traffic starts.
func (l *Lab) RTT(ctx context.Context, src, dst string, count int) ([]time.Duration, error) {
	d := l.Graph.Node(dst)
	if d == nil || d.Kind != HostNode {
		return nil, fmt.Errorf("lab %s has no host %q", l.Name, dst)
	}
	p, err := l.openPinger(src)
	if err != nil {
		return nil, err
	}
	defer p.close()
	var out []time.Duration
	for seq := 0; seq < count && ctx.Err() == nil; seq++ {
		t0, err := p.send(d.Addr, seq)
		if err != nil {
			return out, fmt.Errorf("rtt %s -> %s: %w", src, dst, err)
		}
		for {
			from, got, at, ok := p.recv(t0.Add(time.Second))
			if !ok {
				break
			}
			if from == d.Addr && got == seq {
				out = append(out, at.Sub(t0))
				break
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("rtt %s -> %s: no echo reply", src, dst)
	}
	return out, ctx.Err()
}

// pinger is a raw ICMP socket in one host's namespace: the one ICMP echo
// implementation behind PingAll and RTT.
type pinger struct {
	conn *net.IPConn
	id   int
	buf  []byte
	oob  []byte
}

// pingerIDs makes each pinger's echo ID distinct within this process.
var pingerIDs atomic.Uint32

func (l *Lab) openPinger(host string) (*pinger, error) {
	n := l.Graph.Node(host)
	if n == nil || n.Kind != HostNode {
		return nil, fmt.Errorf("lab %s has no host %q", l.Name, host)
	}
	var conn *net.IPConn
	err := l.Do(host, func() error {
		var err error
		conn, err = net.ListenIP("ip4:icmp", &net.IPAddr{IP: net.IP(n.Addr.AsSlice())})
		if err != nil {
			return err
		}
		// The kernel stamps each reply as it arrives: the RTT then
		// excludes how late this process wakes up to read it.
		rc, err := conn.SyscallConn()
		if err == nil {
			var serr error
			err = rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1) })
			err = errors.Join(err, serr)
		}
		if err != nil {
			conn.Close()
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%s: icmp socket: %w", host, err)
	}
	// A raw socket sees only its own namespace's replies, so the process
	// ID and a per-pinger count tell ours from anyone else's pings there.
	id := (os.Getpid() + int(pingerIDs.Add(1))<<8) & 0xffff
	return &pinger{conn: conn, id: id, buf: make([]byte, 1500), oob: make([]byte, 128)}, nil
}

func (p *pinger) close() { p.conn.Close() }

// send writes one echo request and returns when it was sent.
func (p *pinger) send(dst netip.Addr, seq int) (time.Time, error) {
	msg := icmp.Message{Type: ipv4.ICMPTypeEcho, Body: &icmp.Echo{ID: p.id, Seq: seq, Data: []byte("fabric ping")}}
	b, _ := msg.Marshal(nil)
	t0 := time.Now()
	_, err := p.conn.WriteTo(b, &net.IPAddr{IP: net.IP(dst.AsSlice())})
	return t0, err
}

// recv returns the next reply to this pinger before deadline, with the
// kernel's time of its arrival (the time it was read, if the kernel gave
// none).
func (p *pinger) recv(deadline time.Time) (from netip.Addr, seq int, at time.Time, ok bool) {
	p.conn.SetReadDeadline(deadline)
	for {
		n, oobn, _, peer, err := p.conn.ReadMsgIP(p.buf, p.oob)
		if err != nil {
			return netip.Addr{}, 0, time.Time{}, false
		}
		at := arrival(p.oob[:oobn])
		// ReadMsgIP leaves the IPv4 header on.
		if n < 20 || int(p.buf[0]&0x0f)*4 > n {
			continue
		}
		m, err := icmp.ParseMessage(1, p.buf[int(p.buf[0]&0x0f)*4:n])
		if err != nil || m.Type != ipv4.ICMPTypeEchoReply {
			continue
		}
		e, isEcho := m.Body.(*icmp.Echo)
		if !isEcho || e.ID != p.id || peer == nil {
			continue
		}
		a, _ := netip.AddrFromSlice(peer.IP.To4())
		return a, e.Seq, at, true
	}
}

// arrival is the SO_TIMESTAMPNS time in a message's control data, or now.
func arrival(oob []byte) time.Time {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err == nil {
		for _, m := range msgs {
			if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SO_TIMESTAMPNS && len(m.Data) >= 16 {
				ts := (*unix.Timespec)(unsafe.Pointer(&m.Data[0]))
				return time.Unix(ts.Unix())
			}
		}
	}
	return time.Now()
}
