package tcp

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fabric-emu/fabric/hosts/transport"
)

// sampleEvery is how often a stream's receiver writes a Sample of the
// bytes it has received (the contract asks for 100 ms).
const sampleEvery = 100 * time.Millisecond

// receiver accepts this host's incoming connections and records every
// message they deliver.
type receiver struct {
	env      *transport.Env
	incoming map[uint64]transport.Message // messages to this host, by id
	w        *transport.Writer
	log      *slog.Logger

	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	streams map[*streamIn]struct{}
	// streamWake rings when a stream begins: the sampler sleeps while
	// there is none.
	streamWake transport.Wake
	wg         sync.WaitGroup
	received   atomic.Int64 // messages recorded
}

// streamIn is a long-lived flow being received.
type streamIn struct {
	m     transport.Message
	h     hello
	bytes atomic.Int64
	last  atomic.Int64 // when its last bytes arrived, ns
}

func newReceiver(env *transport.Env, sched []transport.Message, w *transport.Writer, log *slog.Logger) *receiver {
	r := &receiver{env: env, incoming: map[uint64]transport.Message{}, w: w, log: log,
		conns: map[net.Conn]struct{}{}, streams: map[*streamIn]struct{}{}, streamWake: transport.NewWake()}
	for _, m := range sched {
		if m.Dst == env.Host {
			r.incoming[m.ID] = m
		}
	}
	return r
}

// serve accepts connections until ln is closed, and samples streams until
// ctx ends.
func (r *receiver) serve(ctx context.Context, ln net.Listener) {
	r.wg.Add(1)
	go func() { defer r.wg.Done(); r.sample(ctx) }()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		r.mu.Lock()
		r.conns[c] = struct{}{}
		r.mu.Unlock()
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			if err := r.handle(c); err != nil && err != io.EOF {
				r.log.Debug("connection ended", "peer", c.RemoteAddr(), "err", err)
			}
			r.mu.Lock()
			delete(r.conns, c)
			r.mu.Unlock()
			c.Close()
		}()
	}
}

// close ends every connection (streams record what they got) and waits.
func (r *receiver) close() {
	r.mu.Lock()
	for c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}

func (r *receiver) handle(c net.Conn) error {
	br := bufio.NewReaderSize(c, 256<<10)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	h, err := readHello(br)
	if err != nil {
		return err
	}
	c.SetReadDeadline(time.Time{})
	if h.kind == kindStream {
		return r.stream(br, h)
	}
	var hdr [frameHeader]byte
	for {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			return err
		}
		id, size := beUint64(hdr[:8]), int64(beUint64(hdr[8:]))
		if size < 0 || size > maxMessage {
			return io.ErrUnexpectedEOF
		}
		n, err := br.Discard(int(size))
		r.record(id, h, int64(n), time.Now().UnixNano())
		if err != nil {
			return err
		}
	}
}

// stream counts a long-lived flow's bytes until its connection ends.
func (r *receiver) stream(br *bufio.Reader, h hello) error {
	s := &streamIn{m: r.incoming[h.stream], h: h}
	r.mu.Lock()
	r.streams[s] = struct{}{}
	r.mu.Unlock()
	r.streamWake.Signal()
	defer func() {
		r.mu.Lock()
		delete(r.streams, s)
		r.mu.Unlock()
		r.record(h.stream, h, s.bytes.Load(), s.last.Load())
	}()
	buf := make([]byte, 256<<10)
	for {
		n, err := br.Read(buf)
		if n > 0 {
			s.bytes.Add(int64(n))
			s.last.Store(time.Now().UnixNano())
		}
		if err != nil {
			return err
		}
	}
}

// sample writes every stream's cumulative bytes every sampleEvery, while
// there are streams.
func (r *receiver) sample(ctx context.Context) {
	transport.RunWhileBusy(ctx, r.streamWake, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.streams) > 0
	}, transport.Job{Every: sampleEvery, Run: func(now time.Time) {
		r.mu.Lock()
		for s := range r.streams {
			r.w.Sample(transport.Sample{FlowID: s.h.stream, Src: s.h.host, Dst: r.env.Host, TNS: now.UnixNano(), Bytes: s.bytes.Load()})
		}
		r.mu.Unlock()
	}})
}

// record writes the Flow of message id: its scheduled send time to end.
func (r *receiver) record(id uint64, h hello, got, end int64) {
	r.received.Add(1)
	m, ok := r.incoming[id]
	if !ok {
		r.log.Warn("a message this host's schedule does not have", "id", id, "from", h.host)
		m = transport.Message{ID: id, Src: h.host}
	}
	r.w.Flow(transport.Flow{ID: id, Pattern: m.Pattern, Src: m.Src, Dst: r.env.Host, Size: m.Size, Bytes: got,
		DSCP: uint8(h.dscp), CC: h.cc, StartNS: r.env.StartNS + m.TimeNS, EndNS: end, Class: m.Class, Query: m.Query})
}

func beUint64(b []byte) uint64 {
	return uint64(b[0])<<56 | uint64(b[1])<<48 | uint64(b[2])<<40 | uint64(b[3])<<32 |
		uint64(b[4])<<24 | uint64(b[5])<<16 | uint64(b[6])<<8 | uint64(b[7])
}
