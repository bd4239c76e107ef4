package tctest

import (
	"encoding/binary"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Frame is one captured frame: its first bytes and its length on the wire.
type Frame struct {
	Data   []byte // up to SnapLen bytes, from the Ethernet header
	Len    int    // the whole frame's length
	AtNano int64  // when the capture read it (CLOCK_MONOTONIC), not a kernel timestamp
	// CsumNotReady: the kernel had not computed the frame's transport
	// checksum yet (CHECKSUM_PARTIAL, TP_STATUS_CSUMNOTREADY): its
	// checksum field holds the pseudo-header sum, and whoever needs the
	// checksum (a NIC, a delay line's NFQUEUE) completes it over the bytes
	// from the transport header on. A local sender's packets cross veths
	// and ports so.
	CsumNotReady bool
}

// SnapLen is how much of each frame a Capture keeps.
const SnapLen = 128

// Capture records the frames arriving on one interface of a host: a raw
// AF_PACKET socket opened inside the host's namespace, so the test reads
// packets exactly as they reached the host (after every port they
// crossed), with their real lengths and checksum fields (see
// Frame.CsumNotReady).
type Capture struct {
	fd     int
	closed atomic.Bool
	mu     sync.Mutex
	frames []Frame
	done   chan struct{}
}

// CaptureIn starts capturing frames that arrive at host's ifname.
func (l *Lab) CaptureIn(host, ifname string) *Capture {
	l.t.Helper()
	return CaptureIn(l.t, l, host, ifname)
}

// CaptureIn is Lab.CaptureIn on any Namespaces (an emu lab's, for one).
func CaptureIn(t testing.TB, ns Namespaces, host, ifname string) *Capture {
	t.Helper()
	c := &Capture{fd: -1, done: make(chan struct{})}
	err := ns.Do(host, func() error {
		ifi, err := net.InterfaceByName(ifname)
		if err != nil {
			return err
		}
		proto := htons(unix.ETH_P_ALL)
		if c.fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(proto)); err != nil {
			return err
		}
		if err := unix.SetsockoptInt(c.fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 8<<20); err != nil {
			return err
		}
		if err := unix.SetsockoptInt(c.fd, unix.SOL_PACKET, unix.PACKET_AUXDATA, 1); err != nil {
			return err
		}
		// Reads return every 50 ms, so Close is noticed.
		tv := unix.NsecToTimeval(int64(50 * time.Millisecond))
		if err := unix.SetsockoptTimeval(c.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			return err
		}
		return unix.Bind(c.fd, &unix.SockaddrLinklayer{Protocol: proto, Ifindex: ifi.Index})
	})
	if err != nil {
		if c.fd >= 0 {
			unix.Close(c.fd)
		}
		t.Fatalf("capture on %s:%s: %v", host, ifname, err)
	}
	go c.loop()
	t.Cleanup(c.Close)
	return c
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func (c *Capture) loop() {
	defer close(c.done)
	buf, oob := make([]byte, 65536), make([]byte, 256)
	for {
		// MSG_TRUNC: n is the frame's real length even past len(buf).
		n, oobn, _, from, err := unix.Recvmsg(c.fd, buf, oob, unix.MSG_TRUNC)
		if c.closed.Load() {
			return
		}
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue
		}
		f := Frame{Data: append([]byte(nil), buf[:min(n, SnapLen)]...), Len: n, AtNano: monotonic(),
			CsumNotReady: auxStatus(oob[:oobn])&unix.TP_STATUS_CSUMNOTREADY != 0}
		c.mu.Lock()
		c.frames = append(c.frames, f)
		c.mu.Unlock()
	}
}

// auxStatus is tp_status of a frame's PACKET_AUXDATA (0 without one).
func auxStatus(oob []byte) uint32 {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return 0
	}
	for _, m := range msgs {
		if m.Header.Level == unix.SOL_PACKET && m.Header.Type == unix.PACKET_AUXDATA && len(m.Data) >= 4 {
			return binary.NativeEndian.Uint32(m.Data) // struct tpacket_auxdata starts with tp_status
		}
	}
	return 0
}

// Frames returns a copy of what arrived so far.
func (c *Capture) Frames() []Frame {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Frame(nil), c.frames...)
}

// Close stops the capture.
func (c *Capture) Close() {
	if c.closed.Swap(true) {
		return
	}
	<-c.done // the read times out within 50 ms
	unix.Close(c.fd)
}
