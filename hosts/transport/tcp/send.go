package tcp

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/fabric-emu/fabric/hosts/transport"
)

// payload is what every sender writes: the bytes carry no meaning, and one
// shared read-only buffer avoids a copy per message.
var payload = make([]byte, 256<<10)

// dialRetry is how long a sender keeps trying a destination that does not
// listen yet: every host's transport starts at about the same time.
const dialRetry = 15 * time.Second

// sender owns this host's outgoing connections.
type sender struct {
	ctx   context.Context
	env   *transport.Env
	args  Args
	log   *slog.Logger
	pools map[poolKey]*pool
	pick  *rand.Rand // used by the dispatch goroutine only
	wg    sync.WaitGroup
}

// poolKey names the persistent connections to one destination with one
// code point.
type poolKey struct {
	dst  netip.Addr
	dscp transport.DSCP
}

// pool is Conns connections, dialled before the schedule starts.
type pool struct {
	conns []*outConn
}

// outConn is one persistent connection and its queue of messages, which
// its own goroutine writes in order.
type outConn struct {
	mu     sync.Mutex
	wake   *sync.Cond
	queue  []transport.Message
	closed bool
}

func newSender(ctx context.Context, env *transport.Env, args Args, log *slog.Logger, out []transport.Message) *sender {
	s := &sender{ctx: ctx, env: env, args: args, log: log, pools: map[poolKey]*pool{},
		pick: rand.New(rand.NewPCG(env.Seed, 0x7c9))}
	for _, m := range out {
		if m.Stream {
			continue
		}
		k := poolKey{m.DstAddr, args.dscpFor(m)}
		if s.pools[k] != nil {
			continue
		}
		p := &pool{}
		for range args.Conns {
			oc := &outConn{}
			oc.wake = sync.NewCond(&oc.mu)
			p.conns = append(p.conns, oc)
			s.wg.Add(1)
			go func() { defer s.wg.Done(); s.run(k, oc) }()
		}
		s.pools[k] = p
	}
	return s
}

// send hands m to its connection and returns at once: the schedule is open
// loop, and a message queued behind others waits on its connection, not
// here.
func (s *sender) send(m transport.Message) {
	if m.Stream {
		s.wg.Add(1)
		go func() { defer s.wg.Done(); s.stream(m) }()
		return
	}
	p := s.pools[poolKey{m.DstAddr, s.args.dscpFor(m)}]
	oc := p.conns[s.pick.IntN(len(p.conns))]
	oc.mu.Lock()
	oc.queue = append(oc.queue, m)
	oc.mu.Unlock()
	oc.wake.Signal()
}

// close ends every connection's writer once ctx has ended, and waits.
func (s *sender) close() {
	for _, p := range s.pools {
		for _, oc := range p.conns {
			oc.mu.Lock()
			oc.closed = true
			oc.mu.Unlock()
			oc.wake.Broadcast()
		}
	}
	s.wg.Wait()
}

// run dials one pooled connection and writes its queue in order.
func (s *sender) run(k poolKey, oc *outConn) {
	c, err := s.dial(k.dst, hello{kind: kindPool, dscp: k.dscp})
	if err != nil {
		if s.ctx.Err() == nil {
			s.log.Error("connection not established; its messages are lost", "dst", k.dst, "err", err)
		}
		return
	}
	defer c.Close()
	stop := context.AfterFunc(s.ctx, func() { c.Close() }) // unblocks a write in progress
	defer stop()
	var hdr [frameHeader]byte
	for {
		m, ok := oc.next()
		if !ok {
			return
		}
		putFrame(&hdr, m.ID, m.Size)
		if err := writeMessage(c, hdr[:], m.Size); err != nil {
			if s.ctx.Err() == nil {
				s.log.Error("write failed", "id", m.ID, "dst", m.Dst, "err", err)
			}
			return
		}
	}
}

// next blocks for the next queued message; false once closed.
func (oc *outConn) next() (transport.Message, bool) {
	oc.mu.Lock()
	defer oc.mu.Unlock()
	for len(oc.queue) == 0 && !oc.closed {
		oc.wake.Wait()
	}
	if oc.closed {
		return transport.Message{}, false
	}
	m := oc.queue[0]
	oc.queue = oc.queue[1:]
	return m, true
}

func writeMessage(c net.Conn, hdr []byte, size int64) error {
	if _, err := c.Write(hdr); err != nil {
		return err
	}
	for left := size; left > 0; {
		n, err := c.Write(payload[:min(left, int64(len(payload)))])
		left -= int64(n)
		if err != nil {
			return err
		}
	}
	return nil
}

// stream writes one long-lived flow until the trial ends.
func (s *sender) stream(m transport.Message) {
	c, err := s.dial(m.DstAddr, hello{kind: kindStream, dscp: transport.DSCP(m.DSCP), stream: m.ID})
	if err != nil {
		if s.ctx.Err() == nil {
			s.log.Error("stream not established", "id", m.ID, "dst", m.Dst, "err", err)
		}
		return
	}
	defer c.Close()
	stop := context.AfterFunc(s.ctx, func() { c.Close() })
	defer stop()
	for {
		if _, err := c.Write(payload); err != nil {
			return
		}
	}
}

// dial connects to dst with the scheme's congestion control and h's code
// point set before the SYN, retrying while the destination does not listen
// yet, and sends the hello.
func (s *sender) dial(dst netip.Addr, h hello) (net.Conn, error) {
	var effective string
	d := net.Dialer{Control: func(network, _ string, rc syscall.RawConn) error {
		var err error
		effective, err = tuneSocket(rc, network == "tcp6", s.args.CC, h.dscp)
		return err
	}}
	addr := net.JoinHostPort(dst.String(), strconv.Itoa(s.args.Port))
	deadline := time.Now().Add(dialRetry)
	for {
		c, err := d.DialContext(s.ctx, "tcp", addr)
		if err == nil {
			h.cc, h.host = effective, s.env.Host
			if _, err := c.Write(h.encode()); err != nil {
				c.Close()
				return nil, err
			}
			return c, nil
		}
		if s.ctx.Err() != nil || time.Now().After(deadline) {
			return nil, err
		}
		select {
		case <-s.ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
}
