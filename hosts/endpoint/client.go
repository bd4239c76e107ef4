package endpoint

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"
)

// connectTimeout bounds how long a client keeps retrying a server that is
// not listening yet: the runner starts servers first, but a process may
// still be starting when its clients come up.
const connectTimeout = 10 * time.Second

// dial opens a TCP connection to peer with the socket options set before
// connect, sends the hello and waits for the ack.
func dial(ctx context.Context, cfg *Config, peer Peer, h hello, dscp DSCP) (*net.TCPConn, ack, error) {
	var lastErr error
	deadline := time.Now().Add(connectTimeout)
	addr := net.JoinHostPort(peer.Addr.String(), strconv.Itoa(cfg.Port))
	for {
		c, a, err := dialOnce(ctx, cfg, addr, h, dscp)
		if err == nil {
			return c, a, nil
		}
		var refused serverRefused
		if errors.As(err, &refused) || ctx.Err() != nil || time.Now().After(deadline) {
			if lastErr != nil && err == ctx.Err() {
				err = lastErr
			}
			return nil, ack{}, fmt.Errorf("connect to %s (%s): %w", peer, addr, err)
		}
		lastErr = err
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// serverRefused is the server's own error (for example, it lacks the
// congestion control asked for); retrying would not help.
type serverRefused struct{ msg string }

func (e serverRefused) Error() string { return e.msg }

func dialOnce(ctx context.Context, cfg *Config, addr string, h hello, dscp DSCP) (*net.TCPConn, ack, error) {
	d := net.Dialer{Timeout: 2 * time.Second, Control: func(network, _ string, rc syscall.RawConn) error {
		eff, err := tuneSocket(rc, network == "tcp6", cfg.CC, dscp)
		if h.Kind == kindSink {
			h.CC = eff // the receiver records what the sender really uses
		}
		return err
	}}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, ack{}, err
	}
	c := nc.(*net.TCPConn)
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(h.encode()); err != nil {
		c.Close()
		return nil, ack{}, err
	}
	a, err := readAck(c)
	if err != nil {
		c.Close()
		return nil, ack{}, err
	}
	c.SetDeadline(time.Time{})
	return c, a, nil
}

// idSource hands out flow and query ids that are unique across the hosts
// of a run: the top 32 bits hash the host and pattern, the rest count.
type idSource struct {
	base uint64
	n    atomic.Uint64
}

func newIDs(host string, p Pattern) *idSource {
	h := fnv.New32a()
	h.Write([]byte(host + "/" + string(p)))
	return &idSource{base: uint64(h.Sum32()) << 32}
}

func (s *idSource) next() uint64 { return s.base | s.n.Add(1) }
