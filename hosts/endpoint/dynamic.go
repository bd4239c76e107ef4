package endpoint

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"fabric/hosts/workload"
	"fabric/internal/records"
)

// The dynamic pattern (HULL §6.2): an open-loop Poisson process of
// requests. The client keeps ConnsPerServer persistent connections to
// every server (per DSCP class, because a connection's code point is fixed
// when it opens), and for each request draws a size from the workload,
// picks a server and one of its connections at random, and sends an 8-byte
// request; the server answers with that many bytes.
//
// Open loop: arrivals never wait for earlier responses. When the chosen
// connection is still busy with earlier responses the request is queued on
// it (pipelined in the TCP stream) and the server answers in order, as in
// HULL's generator; its completion time then includes that wait, just as
// an application sharing a connection would see it.
//
// The rate is λ = load × link rate / mean size, so the mean receive
// throughput is load × link rate. A flow's completion time runs from just
// before the request is written to the read that returns its last byte.

type dynConn struct {
	c      *net.TCPConn
	server string // the server's own name, from its ack
	cc     string
	dscp   DSCP

	mu    sync.Mutex
	queue []*request // requests written and not yet fully answered, in order
}

type request struct {
	id    uint64
	size  int64
	start int64
	got   int64
}

type dynamicClient struct {
	cfg         *Config
	w           *records.Writer
	outstanding atomic.Int64
	received    atomic.Int64 // bytes of completed responses
	completed   atomic.Int64
	lateness    lateness // generator only
}

// lateness summarises how far behind its schedule the generator sent
// requests. Late requests are sent at once (the rate stays exact), so a
// CPU too busy to keep up shows here and as bunched arrivals; runs with
// large values should not be believed.
type lateness struct {
	n, over1ms int
	sum, max   time.Duration
	sendMax    time.Duration // the longest request write, which delays the next wake-up
}

func (l *lateness) add(d time.Duration) {
	l.n++
	l.sum += d
	l.max = max(l.max, d)
	if d > time.Millisecond {
		l.over1ms++
	}
}

func (l *lateness) logAttrs() []any {
	if l.n == 0 {
		return nil
	}
	return []any{"late_mean", (l.sum / time.Duration(l.n)).Round(time.Microsecond), "late_max", l.max.Round(time.Microsecond),
		"late_over_1ms_pct", float64(l.over1ms) * 100 / float64(l.n), "send_max", l.sendMax.Round(time.Microsecond)}
}

func runDynamic(ctx context.Context, cfg *Config, w *records.Writer) error {
	d := &dynamicClient{cfg: cfg, w: w}
	classes := cfg.DSCP.values()
	// pools[server][class] are that server's connections of one class.
	pools := make([]map[DSCP][]*dynConn, len(cfg.Peers))
	var readers sync.WaitGroup
	var all []*dynConn
	defer func() {
		for _, c := range all {
			c.c.Close()
		}
		readers.Wait()
	}()
	for i, p := range cfg.Peers {
		pools[i] = map[DSCP][]*dynConn{}
		for _, class := range classes {
			for range cfg.ConnsPerServer {
				c, a, err := dial(ctx, cfg, p, hello{Kind: kindReqResp, DSCP: class, Pattern: string(cfg.Pattern), CC: cfg.CC, Host: cfg.Host}, class)
				if err != nil {
					if ctx.Err() != nil {
						return nil
					}
					return err
				}
				dc := &dynConn{c: c, server: a.Host, cc: a.CC, dscp: class}
				pools[i][class] = append(pools[i][class], dc)
				all = append(all, dc)
				readers.Add(1)
				go func() { defer readers.Done(); d.read(dc) }()
			}
		}
	}

	rate := cfg.Load * cfg.LinkRate.BytesPerSecond() / cfg.Workload.Mean() // requests per second (HULL §6.2)
	cfg.Log.Info("dynamic", "workload", cfg.Workload.Name, "mean_bytes", cfg.Workload.Mean(), "load", cfg.Load,
		"link_rate", cfg.LinkRate, "requests_per_s", rate, "servers", len(cfg.Peers), "conns", len(all))

	start := time.Now()
	g := &generator{d: d, pools: pools, rate: rate, start: start,
		// Separate streams for sizes, gaps and choices, so that changing
		// one (say, the number of servers) does not change the others.
		sizes: cfg.Workload.NewSampler(cfg.Seed),
		gaps:  rand.New(rand.NewPCG(cfg.Seed, 1)),
		pick:  rand.New(rand.NewPCG(cfg.Seed, 2)),
		ids:   newIDs(cfg.Host, cfg.Pattern)}
	done := make(chan error)
	go func() {
		// The goroutine ends locked to its thread, so the thread (and its
		// real-time policy) goes away with it.
		pinGenerator()
		done <- g.run(ctx)
	}()
	if err := <-done; err != nil {
		return err
	}
	// Wait for the responses in flight, then report.
	drainEnd := time.Now().Add(cfg.Drain)
	for d.outstanding.Load() > 0 && time.Now().Before(drainEnd) && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	d.report(start, g.sent, g.offered)
	return nil
}

func (d *dynamicClient) report(start time.Time, sent, offered int64) {
	secs := d.cfg.Duration.Seconds()
	d.cfg.Log.Info("dynamic done", "requests", sent, "completed", d.completed.Load(),
		"unfinished", d.outstanding.Load(), "offered_mbps", float64(offered)*8/secs/1e6,
		"received_mbps", float64(d.received.Load())*8/secs/1e6,
		"target_mbps", d.cfg.Load*float64(d.cfg.LinkRate)/1e6, "elapsed", time.Since(start).Round(time.Millisecond))
	d.cfg.Log.Info("dynamic schedule", d.lateness.logAttrs()...)
}

// send queues r on c and writes the request. Only the generator writes,
// so writes need no lock; the queue is shared with c's reader.
func (d *dynamicClient) send(c *dynConn, r *request) error {
	var hdr [8]byte
	putRequest(&hdr, r.size)
	d.outstanding.Add(1)
	c.mu.Lock()
	r.start = time.Now().UnixNano()
	c.queue = append(c.queue, r)
	c.mu.Unlock()
	_, err := c.c.Write(hdr[:])
	return err
}

// read consumes responses in order and records each when its last byte
// arrives.
func (d *dynamicClient) read(c *dynConn) {
	buf := make([]byte, 128<<10)
	for {
		n, err := c.c.Read(buf)
		left := int64(n)
		for left > 0 {
			c.mu.Lock()
			if len(c.queue) == 0 {
				c.mu.Unlock()
				d.cfg.Log.Error("response bytes without a request", "server", c.server)
				return
			}
			r := c.queue[0]
			take := min(left, r.size-r.got)
			r.got += take
			left -= take
			done := r.got == r.size
			if done {
				c.queue[0] = nil
				c.queue = c.queue[1:]
			}
			c.mu.Unlock()
			if done {
				d.w.Flow(records.Flow{ID: r.id, Pattern: string(Dynamic), Src: c.server, Dst: d.cfg.Host,
					Size: r.size, Bytes: r.got, DSCP: uint8(c.dscp), CC: c.cc, StartNS: r.start, EndNS: time.Now().UnixNano()})
				d.outstanding.Add(-1)
				d.completed.Add(1)
				d.received.Add(r.size)
			}
		}
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				d.cfg.Log.Debug("response stream ended", "server", c.server, "err", err)
			}
			return
		}
	}
}

// generator is the open-loop Poisson schedule of one client.
type generator struct {
	d     *dynamicClient
	pools []map[DSCP][]*dynConn
	rate  float64 // requests per second
	start time.Time
	sizes *workload.Sampler
	gaps  *rand.Rand
	pick  *rand.Rand
	ids   *idSource

	sent, offered int64
}

// run sends requests until Duration has passed or ctx ends.
func (g *generator) run(ctx context.Context) error {
	cfg := g.d.cfg
	end := g.start.Add(cfg.Duration)
	next := g.start
	for {
		// The schedule is absolute: a late wake-up is followed by a
		// shorter sleep, so lateness never lowers the rate.
		next = next.Add(time.Duration(g.gaps.ExpFloat64() / g.rate * 1e9))
		if next.After(end) || !sleepUntil(ctx, next) {
			return nil
		}
		g.d.lateness.add(time.Since(next))
		size := max(g.sizes.Next(), 1) // a zero-byte response has no last byte to time
		conns := g.pools[g.pick.IntN(len(g.pools))][cfg.DSCP.For(size)]
		c := conns[g.pick.IntN(len(conns))]
		t0 := time.Now()
		err := g.d.send(c, &request{id: g.ids.next(), size: size})
		g.d.lateness.sendMax = max(g.d.lateness.sendMax, time.Since(t0))
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("request to %s: %w", c.server, err)
		}
		g.sent++
		g.offered += size
	}
}
