package udp

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"

	"github.com/fabric-emu/fabric/hosts/transport"
)

// Args are the scheme's settings for this transport.
type Args struct {
	ECN  bool `json:"ecn,omitempty"`
	Port int  `json:"port,omitempty"`
}

// Defaults and the datagram's layout.
const (
	DefaultPort = 5311
	// HeaderLen is the id and the send time at the start of a payload: the
	// least message size this transport carries.
	HeaderLen = 16
	// Overhead is what a datagram adds to its payload on an Ethernet
	// link: IPv4 20, UDP 8 (ipUDP), Ethernet 14 (what a port's qdisc
	// counts).
	Overhead = ipUDP + 14
	ipUDP    = 28
	// ect0 is the ECN field's ECN-capable code point ECT(0) (RFC 3168).
	ect0 = 2
)

func parseArgs(env *transport.Env) (Args, error) {
	var a Args
	if err := env.DecodeArgs(&a); err != nil {
		return a, err
	}
	if a.Port == 0 {
		a.Port = DefaultPort
	}
	if a.Port < 1 || a.Port > 65535 {
		return a, fmt.Errorf("args.port: want 1..65535, got %d", a.Port)
	}
	return a, nil
}

// Run is the transport's process on one host: it listens, prints the
// ready line, sends each of its messages as one datagram at its time,
// records every datagram it receives, and returns when ctx ends (SIGTERM)
// with its lateness written and its records flushed.
func Run(ctx context.Context, env *transport.Env, stdout io.Writer, log *slog.Logger) error {
	args, err := parseArgs(env)
	if err != nil {
		return err
	}
	return transport.Serve(ctx, env, stdout, func(ctx context.Context, sched []transport.Message, w *transport.Writer) (transport.Endpoint, error) {
		if err := fits(transport.Outgoing(sched, env.Host), env.MTU); err != nil {
			return nil, err
		}
		rx, err := listen(ctx, env, args.Port, sched, w)
		if err != nil {
			return nil, err
		}
		tx, err := newSender(ctx, env.Addr, args)
		if err != nil {
			rx.close()
			return nil, err
		}
		e := &endpoint{args: args, log: log, rx: rx, tx: tx}
		e.wg.Go(rx.receive)
		return e, nil
	})
}

// endpoint is the transport on one host, as transport.Serve runs it.
type endpoint struct {
	args Args
	log  *slog.Logger
	rx   *receiver
	tx   *sender
	wg   sync.WaitGroup // the receiver's loop
}

func (e *endpoint) Begin(_ context.Context, out []transport.Message) func(transport.Message) {
	e.log.Info("udp transport", "sends", len(out), "receives", len(e.rx.incoming), "ecn", e.args.ECN,
		"start_in", time.Until(e.rx.env.Start()).Round(time.Millisecond))
	return e.tx.send
}

// Close closes both sockets and waits for the receiver's loop.
func (e *endpoint) Close() {
	e.tx.close()
	e.rx.close()
	e.wg.Wait()
}

// Finish logs the counters; the lateness is the Sender record's.
func (e *endpoint) Finish(*transport.Writer) error {
	e.log.Info("udp stats", "sent", e.tx.sent, "send_errors", e.tx.errs, "received", e.rx.got, "unknown", e.rx.unknown)
	return nil
}

// fits checks that every message is one datagram: at least the header, at
// most what the link's MTU carries without fragments.
func fits(msgs []transport.Message, mtu int) error {
	most := int64(mtu - ipUDP) // the MTU counts IP and UDP, not Ethernet
	for _, m := range msgs {
		if m.Size < HeaderLen || mtu > 0 && m.Size > most {
			return fmt.Errorf("message %d: %d bytes is not one datagram: want %d..%d (the link's MTU %d less IPv4 and UDP headers)",
				m.ID, m.Size, HeaderLen, most, mtu)
		}
	}
	return nil
}

// sender sends datagrams from one socket, on Dispatch's clock thread.
type sender struct {
	conn       *net.UDPConn
	port       int
	buf        []byte
	sent, errs int64
}

func newSender(ctx context.Context, addr netip.Addr, a Args) (*sender, error) {
	tos := 0
	if a.ECN {
		tos = ect0
	}
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_TOS, tos) })
		return errors.Join(err, serr)
	}}
	c, err := lc.ListenPacket(ctx, "udp4", net.JoinHostPort(addr.String(), "0"))
	if err != nil {
		return nil, fmt.Errorf("udp send socket: %w", err)
	}
	u := c.(*net.UDPConn)
	_ = u.SetWriteBuffer(4 << 20) // best effort: a backlog on the host's own port must not fail a send
	return &sender{conn: u, port: a.Port, buf: make([]byte, 65536)}, nil
}

// send writes message m as one datagram; its DSCP is the schedule's, set
// per datagram only when it differs from the socket's (the poisson
// pattern's are all alike).
func (s *sender) send(m transport.Message) {
	b := s.buf[:m.Size]
	binary.BigEndian.PutUint64(b[0:], m.ID)
	binary.BigEndian.PutUint64(b[8:], uint64(time.Now().UnixNano()))
	if _, err := s.conn.WriteToUDPAddrPort(b, netip.AddrPortFrom(m.DstAddr, uint16(s.port))); err != nil {
		s.errs++ // ENOBUFS: the host's own queue overflowed, a loss the records show
		return
	}
	s.sent++
}

func (s *sender) close() { s.conn.Close() }

// receiver records the datagrams that arrive.
type receiver struct {
	conn     *net.UDPConn
	env      *transport.Env
	incoming map[uint64]transport.Message
	w        *transport.Writer
	got      int64
	unknown  int64
}

func listen(ctx context.Context, env *transport.Env, port int, sched []transport.Message, w *transport.Writer) (*receiver, error) {
	c, err := transport.ListenUDP(ctx, env.Addr, port)
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	rc, err := c.SyscallConn()
	if err == nil {
		var serr error
		err = rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1) })
		err = errors.Join(err, serr)
	}
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("receive timestamps: %w", err)
	}
	in := map[uint64]transport.Message{}
	for _, m := range sched {
		if m.Dst == env.Host {
			in[m.ID] = m
		}
	}
	return &receiver{conn: c, env: env, incoming: in, w: w}, nil
}

// receive reads datagrams, several a system call, until the socket is
// closed, and records each as a delivered message.
func (r *receiver) receive() {
	pc := ipv4.NewPacketConn(r.conn)
	msgs := make([]ipv4.Message, 16)
	for i := range msgs {
		msgs[i].Buffers = [][]byte{make([]byte, 65536)}
		msgs[i].OOB = make([]byte, 128)
	}
	for {
		k, err := pc.ReadBatch(msgs, 0)
		if err != nil {
			return
		}
		for _, m := range msgs[:k] {
			r.record(m.Buffers[0][:m.N], m.OOB[:m.NN])
		}
	}
}

func (r *receiver) record(b, oob []byte) {
	if len(b) < HeaderLen {
		r.unknown++
		return
	}
	m, ok := r.incoming[binary.BigEndian.Uint64(b)]
	if !ok {
		r.unknown++
		return
	}
	r.got++
	r.w.Flow(transport.Flow{ID: m.ID, Pattern: m.Pattern, Src: m.Src, Dst: m.Dst, Size: m.Size, Bytes: int64(len(b)),
		DSCP: m.DSCP, CC: "udp", StartNS: r.env.StartNS + m.TimeNS, EndNS: receivedAt(oob), Class: m.Class, Query: m.Query})
}

// receivedAt is the kernel's receive timestamp in oob, or now without one.
func receivedAt(oob []byte) int64 {
	cms, _ := unix.ParseSocketControlMessage(oob)
	for _, cm := range cms {
		if cm.Header.Level == unix.SOL_SOCKET && cm.Header.Type == unix.SO_TIMESTAMPNS && len(cm.Data) >= 16 {
			return int64(binary.NativeEndian.Uint64(cm.Data[0:]))*1e9 + int64(binary.NativeEndian.Uint64(cm.Data[8:]))
		}
	}
	return time.Now().UnixNano()
}

func (r *receiver) close() { r.conn.Close() }
