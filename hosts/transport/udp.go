package transport

import (
	"context"
	"net"
	"net/netip"
	"strconv"
	"sync/atomic"
	"syscall"

	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"
)

// ReadPackets reads datagrams from c until it is closed, counts each in n
// and hands it to handle with its sender's IPv4 address. b is reused: handle
// must copy what it keeps. fabric's UDP transports (homa, ndp) share it.
//
// It reads up to readBatch datagrams per system call (recvmmsg, through
// x/net's ipv4.PacketConn, the maintained wrapper of it): a receiver that
// the CPU held up finds several datagrams waiting, and a system call per
// datagram is what a busy two-core machine can least afford (system calls
// were 19-48 % of each Homa process's profiled CPU in
// BenchmarkHomaCPUPerPacket). An idle receiver still gets each datagram as
// it comes: the call returns what is there.
func ReadPackets(c *net.UDPConn, n *atomic.Int64, handle func(src netip.Addr, b []byte)) {
	pc := ipv4.NewPacketConn(c)
	msgs := make([]ipv4.Message, readBatch)
	for i := range msgs {
		msgs[i].Buffers = [][]byte{make([]byte, 65536)}
	}
	for {
		k, err := pc.ReadBatch(msgs, 0)
		if err != nil {
			return
		}
		n.Add(int64(k))
		for _, m := range msgs[:k] {
			var src netip.Addr
			if a, ok := m.Addr.(*net.UDPAddr); ok {
				src = a.AddrPort().Addr().Unmap()
			}
			handle(src, m.Buffers[0][:m.N])
		}
	}
}

// readBatch is the most datagrams ReadPackets takes per system call.
const readBatch = 16

// ListenUDP binds the UDP socket a transport receives on, at addr:port,
// with an 8 MB receive buffer: a userspace receiver that the CPU holds up
// for a few milliseconds must not lose what a 100 Mbit/s link brought
// meanwhile. Call it inside the host's network namespace.
func ListenUDP(ctx context.Context, addr netip.Addr, port int) (*net.UDPConn, error) {
	var lc net.ListenConfig
	pc, err := lc.ListenPacket(ctx, "udp4", net.JoinHostPort(addr.String(), strconv.Itoa(port)))
	if err != nil {
		return nil, err
	}
	c := pc.(*net.UDPConn)
	_ = c.SetReadBuffer(8 << 20) // best effort: the kernel caps it at rmem_max
	return c, nil
}

// ByID indexes a schedule's messages by their ID, as receivers look up what
// a message that arrives was scheduled as.
func ByID(sched []Message) map[uint64]Message {
	out := make(map[uint64]Message, len(sched))
	for _, m := range sched {
		out[m.ID] = m
	}
	return out
}

// SendUDP opens a UDP socket at addr (any port) whose packets carry dscp,
// with a send buffer of writeBuffer bytes: how a transport sends a traffic
// class the switch ports classify. Call it inside the host's namespace.
func SendUDP(ctx context.Context, addr netip.Addr, dscp DSCP, writeBuffer int) (*net.UDPConn, error) {
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_TOS, dscp.TOS())
		})
		if err != nil {
			return err
		}
		return serr
	}}
	c, err := lc.ListenPacket(ctx, "udp4", net.JoinHostPort(addr.String(), "0"))
	if err != nil {
		return nil, err
	}
	u := c.(*net.UDPConn)
	_ = u.SetWriteBuffer(writeBuffer)
	return u, nil
}
