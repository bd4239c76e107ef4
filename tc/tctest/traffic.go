package tctest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fabric-emu/fabric/internal/snmp"
	"github.com/fabric-emu/fabric/tc"
	"github.com/fabric-emu/fabric/tc/delay"
)

// Wire overhead of a UDP/IPv4 datagram on a veth: Ethernet 14 + IP 20 +
// UDP 8. Rates in this package are wire rates, as the qdisc counts them.
const udpOverhead = 42

// TCPSink accepts TCP connections on host:port and counts the bytes read.
type TCPSink struct {
	ln    net.Listener
	bytes atomic.Int64
	wg    sync.WaitGroup
}

// Namespaces runs code inside a node's namespace: a Lab here, or an
// emu.Lab.
type Namespaces interface {
	Do(node string, fn func() error) error
}

// ListenTCP starts a sink in host's namespace.
func (l *Lab) ListenTCP(host string, port int) *TCPSink { return ListenTCP(l.t, l, host, port) }

// ListenTCP starts a sink in host's namespace of ns.
func ListenTCP(t testing.TB, ns Namespaces, host string, port int) *TCPSink {
	t.Helper()
	s := &TCPSink{}
	err := ns.Do(host, func() error {
		var err error
		s.ln, err = net.Listen("tcp4", fmt.Sprintf(":%d", port))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := s.ln.Accept()
			if err != nil {
				return
			}
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer c.Close()
				buf := make([]byte, 256<<10)
				for {
					n, err := c.Read(buf)
					s.bytes.Add(int64(n))
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(s.Close)
	return s
}

// Bytes is the total read so far.
func (s *TCPSink) Bytes() int64 { return s.bytes.Load() }

// Close stops the sink.
func (s *TCPSink) Close() { s.ln.Close() }

// TCPBulk opens a connection from host to dst and writes as fast as TCP
// allows until ctx ends. tos sets the IP TOS byte (DSCP; TCP manages the
// ECN bits itself), cc the congestion control ("" = the namespace's).
func (l *Lab) TCPBulk(ctx context.Context, host string, dst netip.AddrPort, tos int, cc string) error {
	return TCPBulk(ctx, l, host, dst, tos, cc)
}

// TCPBulk is Lab.TCPBulk on any Namespaces.
func TCPBulk(ctx context.Context, ns Namespaces, host string, dst netip.AddrPort, tos int, cc string) error {
	var conn net.Conn
	err := ns.Do(host, func() error {
		d := net.Dialer{Timeout: 3 * time.Second, Control: func(network, addr string, rc syscall.RawConn) error {
			if err := setTOS(tos)(network, addr, rc); err != nil || cc == "" {
				return err
			}
			var serr error
			err := rc.Control(func(fd uintptr) {
				serr = unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, cc)
			})
			return errors.Join(err, serr)
		}}
		var err error
		conn, err = d.Dial("tcp4", dst.String())
		return err
	})
	if err != nil {
		return err
	}
	go func() { <-ctx.Done(); conn.Close() }()
	buf := make([]byte, 64<<10)
	for {
		if _, err := conn.Write(buf); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
}

func setTOS(tos int) func(string, string, syscall.RawConn) error {
	return func(_, _ string, rc syscall.RawConn) error {
		if tos == 0 {
			return nil
		}
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_TOS, tos)
		})
		return errors.Join(err, serr)
	}
}

// Datagram is one received UDP packet. A stream sent with NDPFlags keeps
// its sequence number in the low 48 bits (the NDP header's magic and flags
// take the top two bytes), and a trimmed NDP packet still carries it, the
// send time and the flow (they sit in the 20-byte NDP header).
type Datagram struct {
	Flow byte
	Seq  uint64
	// NDPFlags are the NDP header's flags when the payload starts with
	// one (tc.NDPMagic), else 0.
	NDPFlags byte
	SentNs   int64 // sender's CLOCK_REALTIME just before sending
	RecvNs   int64 // the kernel's receive timestamp (SO_TIMESTAMPNS)
	TOS      byte  // as received: DSCP and ECN (CE = 3)
	Len      int   // wire bytes
}

// Latency is the one-way delay; all namespaces share the kernel clock.
func (d Datagram) Latency() time.Duration { return time.Duration(d.RecvNs - d.SentNs) }

// CE reports whether the packet arrived marked Congestion Experienced.
func (d Datagram) CE() bool { return d.TOS&3 == 3 }

// UDPSink records every datagram arriving at host:port.
type UDPSink struct {
	conn *net.UDPConn
	mu   sync.Mutex
	got  []Datagram
	done chan struct{}
}

// ListenUDP starts a recording sink in host's namespace.
func (l *Lab) ListenUDP(host string, port int) *UDPSink { return ListenUDP(l.t, l, host, port) }

// ListenUDP is Lab.ListenUDP on any Namespaces.
func ListenUDP(t testing.TB, ns Namespaces, host string, port int) *UDPSink {
	t.Helper()
	s := &UDPSink{done: make(chan struct{})}
	err := ns.Do(host, func() error {
		var err error
		s.conn, err = net.ListenUDP("udp4", &net.UDPAddr{Port: port})
		if err != nil {
			return err
		}
		rc, err := s.conn.SyscallConn()
		if err != nil {
			return err
		}
		var serr error
		err = rc.Control(func(fd uintptr) {
			serr = errors.Join(
				unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_RECVTOS, 1),
				unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1),
				receiveBuffer(int(fd), 8<<20))
		})
		return errors.Join(err, serr)
	})
	if err != nil {
		t.Fatal(err)
	}
	go s.loop()
	t.Cleanup(s.Close)
	return s
}

func (s *UDPSink) loop() {
	defer close(s.done)
	buf := make([]byte, 2048)
	oob := make([]byte, 256)
	for {
		n, oobn, _, _, err := s.conn.ReadMsgUDP(buf, oob)
		if err != nil {
			return
		}
		if n < 17 {
			continue
		}
		d := Datagram{
			Seq: binary.BigEndian.Uint64(buf[0:]), SentNs: int64(binary.BigEndian.Uint64(buf[8:])),
			Flow: buf[16], Len: n + udpOverhead,
		}
		if n >= tc.NDPHeaderLen && buf[0] == tc.NDPMagic {
			d.NDPFlags = buf[1]
			d.Seq &= 1<<48 - 1
		}
		msgs, _ := unix.ParseSocketControlMessage(oob[:oobn])
		for _, m := range msgs {
			switch {
			case m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SO_TIMESTAMPNS && len(m.Data) >= 16:
				sec := int64(binary.NativeEndian.Uint64(m.Data[0:]))
				nsec := int64(binary.NativeEndian.Uint64(m.Data[8:]))
				d.RecvNs = sec*1e9 + nsec
			case m.Header.Level == unix.IPPROTO_IP && m.Header.Type == unix.IP_TOS && len(m.Data) >= 1:
				d.TOS = m.Data[0]
			}
		}
		s.mu.Lock()
		s.got = append(s.got, d)
		s.mu.Unlock()
	}
}

// Received returns a copy of what arrived so far.
func (s *UDPSink) Received() []Datagram {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Datagram(nil), s.got...)
}

// Close stops the sink.
func (s *UDPSink) Close() {
	s.conn.Close()
	<-s.done
}

// UDPStream describes a constant-rate stream.
type UDPStream struct {
	From     string
	To       netip.AddrPort
	Rate     float64 // wire bits/s
	Size     int     // wire bytes per packet (≥ 59)
	TOS      int
	Flow     byte
	Duration time.Duration
	// Smooth skips the packets a late wake-up missed instead of sending
	// them at once: no bursts, at the price of a slightly lower rate.
	Smooth bool
	// NDPFlags, when not 0, makes every packet an NDP packet: the payload
	// starts with an NDP header (magic 'N', these flags) that keeps the
	// sequence number, send time and flow (see Datagram). Size 62 is a
	// bare NDP header (a control packet).
	NDPFlags byte
	// SrcPort binds the sending socket to this UDP port (0: any).
	SrcPort int
}

// SendUDP sends s at a constant wire rate: packet i leaves at start +
// i·size/rate. The sending thread runs SCHED_FIFO and sleeps to absolute
// deadlines (clock_nanosleep), so that a busy machine delays its wake-ups
// by microseconds, not milliseconds. When it still wakes late it catches
// up at once (long-term rate exact), or with Smooth skips what it missed
// (no bursts). While this process runs delay lines it keeps off their
// CPU (delay.LoopCPU): a real-time thread there takes that CPU from the
// loop, which at a few tens of kpps then falls seconds behind. It returns
// the number of packets sent.
func (l *Lab) SendUDP(ctx context.Context, s UDPStream) (int, error) { return SendUDP(ctx, l, s) }

// SendUDP is Lab.SendUDP on any Namespaces.
func SendUDP(ctx context.Context, ns Namespaces, s UDPStream) (int, error) {
	var conn *net.UDPConn
	err := ns.Do(s.From, func() error {
		var err error
		var local *net.UDPAddr
		if s.SrcPort != 0 {
			local = &net.UDPAddr{Port: s.SrcPort}
		}
		conn, err = net.DialUDP("udp4", local, net.UDPAddrFromAddrPort(s.To))
		if err != nil {
			return err
		}
		rc, err := conn.SyscallConn()
		if err != nil {
			return err
		}
		return setTOS(s.TOS)("", "", rc)
	})
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer delay.OffLoopCPU()()
	if unix.SchedSetAttr(0, &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: 1}, 0) == nil {
		defer unix.SchedSetAttr(0, &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: 0 /* SCHED_OTHER */}, 0)
	}
	payload := make([]byte, s.Size-udpOverhead)
	payload[16] = s.Flow
	interval := int64(float64(s.Size*8) / s.Rate * 1e9)
	start := monotonic()
	end := start + int64(s.Duration)
	sent := 0
	for i := int64(0); ; i++ {
		next := start + i*interval
		if next > end || ctx.Err() != nil {
			return sent, nil
		}
		now := monotonic()
		if s.Smooth && now-next > int64(time.Millisecond) {
			skip := (now - next) / interval
			i += skip
			next += skip * interval
		}
		if next > now {
			ts := unix.NsecToTimespec(next)
			for unix.ClockNanosleep(unix.CLOCK_MONOTONIC, unix.TIMER_ABSTIME, &ts, nil) == unix.EINTR {
			}
		}
		binary.BigEndian.PutUint64(payload[0:], uint64(sent)) // packets, not schedule slots
		binary.BigEndian.PutUint64(payload[8:], uint64(time.Now().UnixNano()))
		if s.NDPFlags != 0 {
			payload[0], payload[1] = tc.NDPMagic, s.NDPFlags
		}
		if _, err := conn.Write(payload); err != nil {
			// ENOBUFS/ECONNREFUSED under overload are the network's business.
			if errors.Is(err, unix.ENOBUFS) || errors.Is(err, unix.ECONNREFUSED) {
				continue
			}
			return sent, err
		}
		sent++
	}
}

func monotonic() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// receiveBuffer sets a socket's receive buffer to n bytes: past
// net.core.rmem_max when the caller may (SO_RCVBUFFORCE, as root), since
// the default maximum (208 KB, about 270 small datagrams) overflows when a
// sink's reader waits a few milliseconds for a CPU.
func receiveBuffer(fd, n int) error {
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, n); err == nil {
		return nil
	}
	return unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, n)
}

// UDPCounter is one of host's UDP counters (the Udp lines of
// /proc/net/snmp in its namespace), such as InCsumErrors or RcvbufErrors
// (datagrams a full socket buffer dropped).
func UDPCounter(t testing.TB, ns Namespaces, host, field string) int {
	t.Helper()
	var n int
	err := ns.Do(host, func() error {
		var err error
		n, err = snmp.UDP(field)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}
