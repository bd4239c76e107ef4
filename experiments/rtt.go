package experiments

import (
	"fmt"
	"net"
	"os"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"

	"fabric/emu"
)

// unloadedRTT measures the round trip from src to dst in the idle lab with
// a few ICMP echoes and keeps the smallest: the ideal FCT of a flow is its
// size at the bottleneck rate plus this RTT (package flows), so it must be
// measured in the lab the flows ran in, before any traffic.
func unloadedRTT(lab *emu.Lab, src, dst string) (time.Duration, error) {
	s, d := lab.Graph.Node(src), lab.Graph.Node(dst)
	if s == nil || d == nil {
		return 0, fmt.Errorf("rtt: no host %s or %s", src, dst)
	}
	var conn *icmp.PacketConn
	if err := lab.Do(src, func() error {
		var err error
		conn, err = icmp.ListenPacket("ip4:icmp", s.Addr.String())
		return err
	}); err != nil {
		return 0, fmt.Errorf("rtt %s: icmp socket: %w", src, err)
	}
	defer conn.Close()
	id := (os.Getpid() ^ 0x5a5a) & 0xffff
	best := time.Duration(0)
	buf := make([]byte, 1500)
	to := &net.IPAddr{IP: net.IP(d.Addr.AsSlice())}
	for seq := 0; seq < 5; seq++ {
		msg := icmp.Message{Type: ipv4.ICMPTypeEcho, Body: &icmp.Echo{ID: id, Seq: seq, Data: []byte("fabric rtt")}}
		b, _ := msg.Marshal(nil)
		t0 := time.Now()
		if _, err := conn.WriteTo(b, to); err != nil {
			return 0, fmt.Errorf("rtt %s -> %s: %w", src, dst, err)
		}
		conn.SetReadDeadline(t0.Add(time.Second))
		for {
			n, _, err := conn.ReadFrom(buf)
			if err != nil {
				break
			}
			m, err := icmp.ParseMessage(1, buf[:n])
			if err != nil || m.Type != ipv4.ICMPTypeEchoReply {
				continue
			}
			if e, ok := m.Body.(*icmp.Echo); ok && e.ID == id && e.Seq == seq {
				if rtt := time.Since(t0); best == 0 || rtt < best {
					best = rtt
				}
				break
			}
		}
	}
	if best == 0 {
		return 0, fmt.Errorf("rtt %s -> %s: no echo reply", src, dst)
	}
	return best, nil
}
