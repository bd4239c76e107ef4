package endpoint

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"fabric/internal/records"
	"golang.org/x/sys/unix"
)

// payload is what every sender writes: the bytes carry no meaning, and one
// shared read-only buffer avoids a copy per flow.
var payload = make([]byte, 256<<10)

// server is the receiving role: it answers requests, sinks long-lived
// flows and records probes.
type server struct {
	cfg *Config
	w   *records.Writer

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	sinks map[*sinkFlow]struct{}
	wg    sync.WaitGroup
}

// sinkFlow is a long-lived flow being received.
type sinkFlow struct {
	h     hello
	start int64
	bytes atomic.Int64
}

func runServer(ctx context.Context, cfg *Config, w *records.Writer) error {
	s := &server{cfg: cfg, w: w, conns: map[net.Conn]struct{}{}, sinks: map[*sinkFlow]struct{}{}}
	addr := ":" + strconv.Itoa(cfg.Port)
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("server: %w", err)
	}
	pc, err := lc.ListenPacket(ctx, "udp", addr)
	if err != nil {
		ln.Close()
		return fmt.Errorf("server: %w", err)
	}
	udp := pc.(*net.UDPConn)
	if err := enableRxTimestamps(udp); err != nil {
		ln.Close()
		udp.Close()
		return err
	}
	// The experiment runner waits for this line before starting clients;
	// keep its text.
	cfg.Log.Info("server listening", "host", cfg.Host, "port", cfg.Port)

	s.wg.Add(3)
	go func() { defer s.wg.Done(); s.accept(ln) }()
	go func() { defer s.wg.Done(); s.receiveProbes(udp) }()
	go func() { defer s.wg.Done(); s.sample(ctx) }()

	<-ctx.Done()
	ln.Close()
	udp.Close()
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

func (s *server) accept(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return // closed on shutdown
		}
		s.mu.Lock()
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if err := s.serve(c.(*net.TCPConn)); err != nil {
				s.cfg.Log.Debug("connection ended", "peer", c.RemoteAddr(), "err", err)
			}
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
			c.Close()
		}()
	}
}

// serve handles one connection from hello to close.
func (s *server) serve(c *net.TCPConn) error {
	r := bufio.NewReaderSize(c, 4096) // batches pipelined 8-byte requests into one read
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	h, err := readHello(r)
	if err != nil {
		return fmt.Errorf("hello: %w", err)
	}
	c.SetReadDeadline(time.Time{})

	// A request/response server sends with the client's choice of
	// congestion control; a sink only sends ACKs, so it keeps its own.
	cc := s.cfg.CC
	if h.Kind == kindReqResp && h.CC != "" {
		cc = h.CC
	}
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	eff, err := tuneSocket(rc, isIPv6(c.LocalAddr()), cc, h.DSCP)
	if err != nil {
		c.Write(ack{Err: fmt.Sprintf("server %s: %v", s.cfg.Host, err)}.encode())
		s.cfg.Log.Error("refused connection", "client", h.Host, "err", err)
		return err
	}
	if _, err := c.Write(ack{OK: true, Host: s.cfg.Host, CC: eff}.encode()); err != nil {
		return err
	}
	if h.Kind == kindSink {
		return s.sink(r, h)
	}
	return s.answer(r, c)
}

// answer serves requests in the order they arrive: a client that queues
// several requests on one connection gets its responses back to back.
func (s *server) answer(r *bufio.Reader, c *net.TCPConn) error {
	var hdr [8]byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		left := binary.BigEndian.Uint64(hdr[:])
		if left > maxRequest {
			return fmt.Errorf("request for %d bytes exceeds the limit", left)
		}
		for left > 0 {
			n := min(left, uint64(len(payload)))
			if _, err := c.Write(payload[:n]); err != nil {
				return err
			}
			left -= n
		}
	}
}

// sink receives a long-lived flow until the sender closes it (or the
// server stops) and records it.
func (s *server) sink(r *bufio.Reader, h hello) error {
	f := &sinkFlow{h: h, start: time.Now().UnixNano()}
	s.mu.Lock()
	s.sinks[f] = struct{}{}
	s.mu.Unlock()
	buf := make([]byte, 256<<10)
	var err error
	for {
		var n int
		n, err = r.Read(buf)
		f.bytes.Add(int64(n))
		if err != nil {
			break
		}
	}
	end := time.Now().UnixNano()
	s.mu.Lock()
	delete(s.sinks, f)
	s.mu.Unlock()
	s.sampleOne(f, end)
	b := f.bytes.Load()
	// A long-lived flow has no requested size: it is as large as what arrived.
	s.w.Flow(records.Flow{ID: h.FlowID, Pattern: h.Pattern, Src: h.Host, Dst: s.cfg.Host,
		Size: b, Bytes: b, DSCP: uint8(h.DSCP), CC: h.CC, StartNS: f.start, EndNS: end})
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

// sample writes the cumulative bytes of every long-lived flow each
// SampleInterval (100 ms by default, as the issue asks).
func (s *server) sample(ctx context.Context) {
	t := time.NewTicker(s.cfg.SampleInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s.mu.Lock()
			for f := range s.sinks {
				s.sampleOne(f, now.UnixNano())
			}
			s.mu.Unlock()
		}
	}
}

func (s *server) sampleOne(f *sinkFlow, tns int64) {
	s.w.Sample(records.Sample{FlowID: f.h.FlowID, Src: f.h.Host, Dst: s.cfg.Host, TNS: tns, Bytes: f.bytes.Load()})
}

// enableRxTimestamps asks the kernel to stamp each received datagram, so a
// probe's one-way delay does not include the time the reader took to be
// scheduled, and to pass up its TOS byte.
func enableRxTimestamps(c *net.UDPConn) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1)
		if serr == nil {
			// The TOS byte as received: the probe's DSCP on the wire, not
			// what the sender claims.
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

func (s *server) receiveProbes(c *net.UDPConn) {
	buf := make([]byte, 65536)
	oob := make([]byte, 128)
	for {
		n, oobn, _, _, err := c.ReadMsgUDP(buf, oob)
		if err != nil {
			return // closed on shutdown
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
			dscp = DSCP(tos >> 2)
		}
		s.w.Probe(records.Probe{Seq: p.seq, Src: p.host, Dst: s.cfg.Host, DSCP: uint8(dscp), SendNS: p.sendNS, RecvNS: recv})
	}
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
