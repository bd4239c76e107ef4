package ndp

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"golang.org/x/sys/unix"
)

// Spraying (NDP §3: per-packet multipath). Switches hash a packet's
// 5-tuple to pick one of their equal-cost next hops, each with a seed of
// its own (emu/build.go), so a sender chooses a path per packet only by
// choosing the header fields hashed: DATA packet i leaves from source port
// SprayPortBase + i mod Args.Paths.
//
// Why so many ports: which path a port takes is a hash no host can
// predict, so a few ports split a message as unevenly as dice would. With
// 16 ports (one socket each, the first version), one 8 MB message from
// pod 0 to pod 1 of a k = 4 fat tree put 1805, 1445, 1805 and 723 packets
// on the four core links, +25 % to −50 % of even (TestLabSprayEvensCoreLinks);
// over n ports each link's share varies by about sqrt(3/n) of even, so
// 16384 ports (the dynamic range, 49152–65535) make it about 1.4 %. The
// paper's senders choose paths outright because they know the topology
// (§3); this is the nearest a host can do behind hashing switches.
//
// A socket per port would be 16384 sockets per host, so DATA leaves
// through one raw IPv4 socket of protocol UDP that writes the UDP header
// itself (its checksum included: the kernel computes none for raw
// sockets, and a trimming port keeps it valid). The kernel still hands
// the raw socket a copy of every UDP packet the host receives; a socket
// filter that accepts nothing drops them at once.

// SprayPortBase is the first source port DATA leaves from.
const SprayPortBase = 49152

// MaxPaths is the most source ports a sender sprays over (49152–65535).
const MaxPaths = 65536 - SprayPortBase

// sprayer sends DATA from any source port.
type sprayer struct {
	conn *net.IPConn
	rc   syscall.RawConn // conn's, for sendmsg with two buffers
	src  netip.Addr
	port int // the destination port
}

// openSprayer opens the raw socket on src; call it in the host's namespace.
func openSprayer(ctx context.Context, src netip.Addr, dstPort int) (*sprayer, error) {
	var lc net.ListenConfig
	c, err := lc.ListenPacket(ctx, "ip4:udp", src.String())
	if err != nil {
		return nil, fmt.Errorf("ndp raw socket: %w", err)
	}
	conn := c.(*net.IPConn)
	rc, err := conn.SyscallConn()
	if err != nil {
		conn.Close()
		return nil, err
	}
	dropAll := []unix.SockFilter{{Code: unix.BPF_RET | unix.BPF_K, K: 0}}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptSockFprog(int(fd), unix.SOL_SOCKET, unix.SO_ATTACH_FILTER,
			&unix.SockFprog{Len: uint16(len(dropAll)), Filter: &dropAll[0]})
	}); err != nil || serr != nil {
		conn.Close()
		return nil, fmt.Errorf("ndp raw socket filter: %w", errors.Join(err, serr))
	}
	_ = conn.SetWriteBuffer(1 << 20)
	return &sprayer{conn: conn, rc: rc, src: src, port: dstPort}, nil
}

// send writes payload to dst as one UDP datagram from SprayPortBase+path.
// The header goes in a buffer of its own (sendmsg gathers both), so
// payload is not copied.
func (s *sprayer) send(dst netip.Addr, path int, payload []byte) error {
	var hdr [8]byte
	binary.BigEndian.PutUint16(hdr[0:], uint16(SprayPortBase+path))
	binary.BigEndian.PutUint16(hdr[2:], uint16(s.port))
	binary.BigEndian.PutUint16(hdr[4:], uint16(len(hdr)+len(payload)))
	binary.BigEndian.PutUint16(hdr[6:], udpChecksum(s.src, dst, hdr[:], payload))
	to := &unix.SockaddrInet4{Addr: dst.As4()}
	var serr error
	err := s.rc.Write(func(fd uintptr) bool {
		_, serr = unix.SendmsgBuffers(int(fd), [][]byte{hdr[:], payload}, nil, to, 0)
		return serr != unix.EAGAIN
	})
	return errors.Join(err, serr)
}

func (s *sprayer) close() error { return s.conn.Close() }

// udpChecksum is the UDP checksum (RFC 768) of a datagram whose header's
// checksum field is 0.
func udpChecksum(src, dst netip.Addr, hdr, payload []byte) uint16 {
	s4, d4 := src.As4(), dst.As4()
	sum := onesSum(0, s4[:])
	sum = onesSum(sum, d4[:])
	sum += unix.IPPROTO_UDP + uint64(len(hdr)+len(payload))
	sum = onesSum(onesSum(sum, hdr), payload)
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	if c := ^uint16(sum); c != 0 {
		return c
	}
	return 0xffff // a computed 0 is sent as all ones: 0 means "none"
}

// onesSum adds b's big-endian 16-bit words (an odd last byte padded with
// 0) to sum, unfolded. It adds 8 bytes at a time as two 32-bit halves,
// which folds to the same 16-bit sum (2^16 ≡ 1 modulo 2^16 − 1) and
// cannot overflow 64 bits for any datagram.
func onesSum(sum uint64, b []byte) uint64 {
	for len(b) >= 8 {
		v := binary.BigEndian.Uint64(b)
		sum += v>>32 + v&0xffffffff
		b = b[8:]
	}
	for len(b) >= 2 {
		sum += uint64(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		sum += uint64(b[0]) << 8
	}
	return sum
}
