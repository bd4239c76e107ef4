package probe

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fabric-emu/fabric/hosts/transport"
)

// Sink receives probes on addr until ctx ends and writes a Probe record of
// each: the kernel's receive timestamp (so the reader's scheduling delay is
// not counted) and the DSCP as it arrived on the wire. It calls ready once
// it listens.
func Sink(ctx context.Context, host string, addr netip.Addr, port int, w *transport.Writer, ready func()) error {
	var lc net.ListenConfig
	pc, err := lc.ListenPacket(ctx, "udp", net.JoinHostPort(addr.String(), strconv.Itoa(cmpOr(port, DefaultPort))))
	if err != nil {
		return fmt.Errorf("probe sink: %w", err)
	}
	c := pc.(*net.UDPConn)
	defer c.Close()
	if err := enableRxInfo(c); err != nil {
		return err
	}
	ready()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	buf := make([]byte, 65536)
	oob := make([]byte, 128)
	for {
		n, oobn, _, _, err := c.ReadMsgUDP(buf, oob)
		if err != nil {
			return nil // closed at the end
		}
		recv, tos := controlInfo(oob[:oobn])
		if recv == 0 {
			recv = time.Now().UnixNano()
		}
		p, ok := decodeProbe(buf[:n])
		if !ok {
			continue
		}
		dscp := p.dscp
		if tos >= 0 {
			dscp = transport.DSCP(tos >> 2)
		}
		w.Probe(transport.Probe{Seq: p.seq, Src: p.host, Dst: host, DSCP: uint8(dscp), SendNS: p.sendNS, RecvNS: recv})
	}
}

// enableRxInfo asks the kernel to stamp each received datagram and to pass
// up its TOS byte.
func enableRxInfo(c *net.UDPConn) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1)
		if serr == nil {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_RECVTOS, 1)
		}
	}); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("SO_TIMESTAMPNS: %w", serr)
	}
	return nil
}

// controlInfo extracts the kernel receive time (SCM_TIMESTAMPNS, a struct
// timespec; 0 if absent) and the IP TOS byte (-1 if absent).
func controlInfo(oob []byte) (recvNS int64, tos int) {
	tos = -1
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return 0, tos
	}
	for _, m := range msgs {
		switch {
		case m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SCM_TIMESTAMPNS && len(m.Data) >= 16:
			sec := int64(binary.NativeEndian.Uint64(m.Data[0:8]))
			nsec := int64(binary.NativeEndian.Uint64(m.Data[8:16]))
			recvNS = sec*1e9 + nsec
		case m.Header.Level == unix.IPPROTO_IP && m.Header.Type == unix.IP_TOS && len(m.Data) >= 1:
			tos = int(m.Data[0])
		}
	}
	return recvNS, tos
}
