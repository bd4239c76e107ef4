// Package fluid is a fast model of one bottleneck port shared by classes
// of congestion-controlled flows: SWP's network model (Zhao, Goyal,
// Alizadeh, Anderson, "SLOs without priorities", §4), which the paper
// runs as the inner loop of its optimizer because it is 50–80× faster
// than packet simulation (its Table 3). fabric uses it for what a model
// is good at and a lab is not: a cheap first guess of the least rate at
// which a traffic mix meets its SLOs, which the capacity search then
// checks on emulated trials (experiments.Search).
//
// The model, as §4 states it and as this package computes it:
//   - Flows of bytes, not packets, arrive at a single bottleneck with an
//     unbounded queue per band, served at the port's rate C by its
//     discipline: one FIFO; strict priority among bands; or weights, each
//     backlogged band getting at least w_k/Σw of C and an idle band's
//     share going to the busy ones (eq. 8–10). Within a band bytes leave
//     in arrival order, or, with Fair, every backlogged flow of the band
//     gets an equal share (fair queueing within the class).
//   - The unit of congestion control is a connection, which may carry
//     many messages one after another (Flow.Conn): a message waits for
//     those before it on its connection, and a connection that has sent
//     before resumes at the rate it had (Linux with
//     tcp_slow_start_after_idle off keeps its window), not from the
//     initial window. §4 has one flow per message.
//   - A new connection is uncontrolled for one round trip: it sends its first
//     InitialWindow bytes (or all of it, if smaller) at the line rate,
//     then waits for feedback (eq. 2 and 3 with r_init·2τ the window).
//     Kernel TCP's window is 10 segments, not §4's bandwidth-delay
//     product: fabric's transports are Linux's.
//   - Then it is controlled: its ideal rate is the band's capacity less
//     the drain of the band's queue above the threshold T, shared evenly
//     among the band's controlled flows, as seen one round trip ago
//     (eq. 6 and 11 with U = 1 and β = 0, the paper's DCTCP setting,
//     Table 2), plus one segment per round trip while that queue is
//     below T (TCP's additive increase; see Sender.Probe), and its actual rate follows that ideal as a first-order
//     lag of time constant η·RTT/2 (eq. 7; η = 5.5 for DCTCP, Table 2).
//
// What it leaves out, by design (§4.1): packets, losses (the queue is
// unbounded), unfairness among long flows, the sender's own stack. So its
// answers are a guess to check, never a result.
package fluid

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"
)

// Flow is one message to the bottleneck's receiver.
type Flow struct {
	StartNS int64 // when it is scheduled to start
	Size    int64 // application bytes
	Band    int   // the port's band its packets are classified into
	// Conn is the connection that carries it: messages with the same
	// Conn (> 0) share one byte stream, in order of start, and its
	// congestion state, as fabric's tcp transport pipelines messages on a
	// pool of persistent connections; 0 is a connection of the message's
	// own.
	Conn int
}

// Port is the bottleneck's service.
type Port struct {
	RateBPS float64
	// Bands is how many queues the port has (1: a single FIFO).
	Bands int
	// Weights are the bands' shares when set; unset, bands are strict
	// priorities, band 0 first.
	Weights []int
	// Fair shares each band equally among its backlogged flows instead of
	// serving its bytes in arrival order.
	Fair bool
	// Threshold is the backlog (bytes) of a band above which its senders
	// are told to slow down: DCTCP's marking threshold K, or for a loss-
	// based sender the buffer.
	Threshold float64
}

// Sender is the congestion control model's parameters (SWP Table 1).
type Sender struct {
	// RTT is the unloaded round trip: the uncontrolled phase's length
	// and the age of every congestion signal a sender acts on.
	RTT time.Duration
	// InitialWindow is what a new flow sends before any feedback, bytes
	// on the wire.
	InitialWindow float64
	// Smoothing is η: rates follow their ideal with time constant η·RTT/2.
	Smoothing float64
	// WireFactor is wire bytes per application byte (headers: 1514/1448
	// for full TCP segments on Ethernet).
	WireFactor float64
	// Probe is what a controlled sender sends per round trip beyond its
	// share while its band's queue is below the threshold: TCP's additive
	// increase, one segment. It is what makes a backlogged band hold
	// about Threshold bytes, as DCTCP's queue sits near K (Alizadeh et
	// al., DCTCP, §3.1), where §4's rule alone would keep any queue the
	// first round trips left.
	Probe float64
}

// LinuxTCP is SWP-D's setting (Table 2: U = 100 %, β = 0, η = 5.5) with
// Linux's initial window of 10 segments (RFC 6928) and additive increase,
// for full-size TCP segments of an MTU of mtu bytes: 52 bytes of IP and
// TCP headers with timestamps, 14 of Ethernet. SWP calibrated it to
// DCTCP; a loss-based sender is the same model with the port's buffer as
// its threshold (Port.Threshold), a coarser guess.
func LinuxTCP(rtt time.Duration, mtu int) Sender {
	mss := float64(mtu - 52)
	frame := float64(mtu + 14)
	return Sender{RTT: rtt, InitialWindow: 10 * frame, Smoothing: 5.5, WireFactor: frame / mss, Probe: frame}
}

// Run models flows (in any order) through port and returns, per flow,
// its one-way completion time: from its start to its last byte at the
// receiver, path after the bottleneck (the path's delay outside the
// queue: a fixed delay before the queue shifts every flow alike). A flow
// still unfinished at horizon gets -1.
func Run(port Port, snd Sender, path time.Duration, flows []Flow, horizon time.Duration) ([]time.Duration, error) {
	if port.RateBPS <= 0 || port.Bands < 1 || (len(port.Weights) > 0 && len(port.Weights) != port.Bands) {
		return nil, fmt.Errorf("fluid: bad port %+v", port)
	}
	for _, f := range flows {
		if f.Band < 0 || f.Band >= port.Bands {
			return nil, fmt.Errorf("fluid: flow in band %d of a port with %d", f.Band, port.Bands)
		}
	}
	m := newModel(port, snd, flows)
	m.run(int64(horizon))
	out := make([]time.Duration, len(flows))
	for i, end := range m.ends {
		out[i] = -1
		if end >= 0 {
			out[i] = time.Duration(end-flows[i].StartNS) + path
		}
	}
	return out, nil
}

// conn is one connection in the model: a byte stream with its rate.
type conn struct {
	band               int
	unsent, queued     float64 // bytes not yet sent, and in the bottleneck's queue
	delivered, written float64 // bytes past the bottleneck, and ever given to it
	rate               float64 // actual sending rate, bytes/s
	uncontrolledUntil  float64 // end of the first round trip (s); 0 before first use
	window             float64 // initial window still to send in it
	pending            []pendingMsg
	active             bool
}

// pendingMsg is a message on a connection: done when the connection has
// delivered end bytes.
type pendingMsg struct {
	flow int
	end  float64
}

// chunk is bytes of one connection, queued in arrival order.
type chunk struct {
	conn  int
	bytes float64
}

// model is one run.
type model struct {
	port         Port
	snd          Sender
	flows        []Flow
	wire         []float64 // flows' wire bytes
	connOf       []int     // flows' connections
	conns        []conn
	ends         []int64 // per flow: when its last byte left the bottleneck; -1 until then
	order        []int   // flows by start
	dt, rtt      float64
	capacity     float64 // bytes/s
	queues       [][]chunk
	backlog      []float64
	hist         [][]signal // a ring of a round trip's steps, per band
	lag          int        // steps in a round trip
	active       []int      // connections with bytes unsent or queued
	controlled   []int      // per band, now
	bandCapacity []float64
	backlogged   []*conn // drainFair's scratch, kept so that a step allocates nothing
}

// signal is what a band's senders see of it, a round trip later.
type signal struct {
	backlog, capacity float64
	controlled        int
}

func newModel(port Port, snd Sender, flows []Flow) *model {
	capacity := port.RateBPS / 8
	// The round trip never shorter than two full frames' time: on a lab
	// without delay lines the feedback loop still takes that long.
	rtt := max(snd.RTT.Seconds(), 2*1514/capacity)
	// Steps of a 32nd of the round trip resolve the uncontrolled phase
	// and the lag; no step need be shorter than a quarter frame's time.
	dt := max(rtt/32, 1514/capacity/4)
	m := &model{port: port, snd: snd, flows: flows, dt: dt, rtt: rtt, capacity: capacity,
		queues: make([][]chunk, port.Bands), backlog: make([]float64, port.Bands),
		controlled: make([]int, port.Bands), bandCapacity: make([]float64, port.Bands)}
	m.lag = max(int(math.Round(rtt/dt)), 1)
	m.hist = make([][]signal, m.lag)
	for i := range m.hist {
		m.hist[i] = make([]signal, port.Bands)
	}
	m.forget()
	wf := max(snd.WireFactor, 1)
	named := map[int]int{}
	for i, f := range flows {
		m.wire = append(m.wire, float64(f.Size)*wf)
		m.ends = append(m.ends, -1)
		m.order = append(m.order, i)
		c, ok := named[f.Conn]
		if f.Conn == 0 || !ok {
			c = len(m.conns)
			m.conns = append(m.conns, conn{band: f.Band})
			if f.Conn != 0 {
				named[f.Conn] = c
			}
		}
		m.connOf = append(m.connOf, c)
	}
	slices.SortStableFunc(m.order, func(a, b int) int { return cmp.Compare(flows[a].StartNS, flows[b].StartNS) })
	return m
}

func (m *model) run(horizonNS int64) {
	next := 0
	step := 0
	for t := 0.0; ; t += m.dt {
		tNS := int64(t * 1e9)
		if len(m.active) == 0 && next < len(m.order) { // idle: skip to the next start
			if gap := float64(m.flows[m.order[next]].StartNS)/1e9 - t; gap > m.dt {
				t += math.Floor(gap/m.dt) * m.dt
				tNS = int64(t * 1e9)
				m.forget()
			}
		}
		if tNS > horizonNS || (next == len(m.order) && len(m.active) == 0) {
			return
		}
		for next < len(m.order) && m.flows[m.order[next]].StartNS <= tNS {
			m.admit(m.order[next], t)
			next++
		}
		seen := m.hist[step%m.lag] // a round trip ago (the ring's oldest)
		m.send(t, seen)
		m.serve()
		m.finish(tNS + int64(m.dt*1e9))
		now := m.hist[step%m.lag]
		for k := range now {
			now[k] = signal{backlog: m.backlog[k], capacity: m.bandCapacity[k], controlled: m.controlled[k]}
		}
		step++
	}
}

// admit puts flow i's bytes on its connection at time t; a connection
// used for the first time starts its uncontrolled round trip.
func (m *model) admit(i int, t float64) {
	ci := m.connOf[i]
	c := &m.conns[ci]
	switch {
	case c.uncontrolledUntil == 0: // first use: the initial window
		c.uncontrolledUntil, c.window = t+m.rtt, m.snd.InitialWindow
		c.rate = m.snd.InitialWindow / m.rtt // what the window amounts to: where the control starts
	case !c.active: // idle since it last sent: the window it kept goes out at once
		c.uncontrolledUntil, c.window = t+m.rtt, max(c.rate*m.rtt, m.snd.InitialWindow)
	}
	c.unsent += m.wire[i]
	c.written += m.wire[i]
	c.pending = append(c.pending, pendingMsg{flow: i, end: c.written})
	if !c.active {
		c.active = true
		m.active = append(m.active, ci)
	}
}

// forget makes every remembered signal an idle port's, after a skip over
// idle time.
func (m *model) forget() {
	for _, h := range m.hist {
		for k := range h {
			h[k] = signal{capacity: m.share(k, nil)}
		}
	}
}

// send moves each active connection's bytes for this step into its band.
func (m *model) send(t float64, seen []signal) {
	clear(m.controlled)
	for _, ci := range m.active {
		c := &m.conns[ci]
		if c.unsent <= 0 {
			continue
		}
		var b float64
		if t < c.uncontrolledUntil {
			// Uncontrolled (eq. 2 and 3): the initial window goes out at
			// the line rate, as Linux sends it, then nothing until
			// feedback.
			b = min(m.capacity*m.dt, c.window, c.unsent)
			c.window -= b
		} else {
			m.controlled[c.band]++
			s := seen[c.band]
			ideal := (s.capacity - max(s.backlog-m.port.Threshold, 0)/m.rtt) / float64(max(s.controlled, 1))
			if s.backlog < m.port.Threshold {
				ideal += m.snd.Probe / m.rtt
			}
			ideal = min(max(ideal, 0), m.capacity)
			c.rate += (ideal - c.rate) * min(m.dt/(m.snd.Smoothing*m.rtt/2), 1)
			b = min(c.rate*m.dt, c.unsent)
		}
		if b <= 0 {
			continue
		}
		c.unsent -= b
		c.queued += b
		m.backlog[c.band] += b
		if m.port.Fair { // fair queueing keeps no arrival order
			continue
		}
		q := m.queues[c.band]
		if n := len(q); n > 0 && q[n-1].conn == ci {
			q[n-1].bytes += b
		} else {
			m.queues[c.band] = append(q, chunk{conn: ci, bytes: b})
		}
	}
}

// serve drains one step of the port's capacity from its bands.
func (m *model) serve() {
	budget := m.capacity * m.dt
	if len(m.port.Weights) == 0 { // strict priority (or one FIFO)
		for k := range m.queues {
			m.bandCapacity[k] = budget / m.dt
			budget -= m.drain(k, budget)
		}
		return
	}
	// Weighted: water-fill the backlogged bands by weight (eq. 10).
	for k := range m.queues {
		m.bandCapacity[k] = m.share(k, m.backlog)
	}
	for budget > 1e-9 {
		total := 0
		for k, w := range m.port.Weights {
			if m.backlog[k] > 1e-9 {
				total += w
			}
		}
		if total == 0 {
			return
		}
		used := 0.0
		for k, w := range m.port.Weights {
			if m.backlog[k] > 1e-9 {
				used += m.drain(k, budget*float64(w)/float64(total))
			}
		}
		budget -= used
		if used <= 1e-9 {
			return
		}
	}
}

// share is the capacity band k may count on when the bands with backlog
// (all but k idle when backlog is nil) are active (eq. 10).
func (m *model) share(k int, backlog []float64) float64 {
	if len(m.port.Weights) == 0 {
		return m.capacity
	}
	total := m.port.Weights[k]
	for l, w := range m.port.Weights {
		if l != k && backlog != nil && backlog[l] > 1e-9 {
			total += w
		}
	}
	return m.capacity * float64(m.port.Weights[k]) / float64(total)
}

// drain serves up to budget bytes of band k and returns how many.
func (m *model) drain(k int, budget float64) float64 {
	if m.port.Fair {
		return m.drainFair(k, budget)
	}
	served := 0.0
	q := m.queues[k]
	for len(q) > 0 && budget-served > 1e-9 {
		c := &q[0]
		b := min(c.bytes, budget-served)
		c.bytes -= b
		served += b
		m.conns[c.conn].queued -= b
		m.conns[c.conn].delivered += b
		if c.bytes <= 1e-9 {
			q = q[1:]
		}
	}
	m.queues[k] = q
	m.backlog[k] -= served
	return served
}

// drainFair shares budget equally among band k's backlogged connections
// (the port hashes flows, that is connections, into its buckets). It
// water-fills: the smallest backlogs are served first, each an equal
// share of what is left, so what a short one cannot use goes to the rest.
func (m *model) drainFair(k int, budget float64) float64 {
	backlogged := m.backlogged[:0]
	for _, ci := range m.active {
		if c := &m.conns[ci]; c.band == k && c.queued > 1e-9 {
			backlogged = append(backlogged, c)
		}
	}
	m.backlogged = backlogged
	slices.SortFunc(backlogged, func(x, y *conn) int { return cmp.Compare(x.queued, y.queued) })
	served := 0.0
	for i, c := range backlogged {
		b := min(c.queued, (budget-served)/float64(len(backlogged)-i))
		c.queued -= b
		c.delivered += b
		served += b
	}
	m.backlog[k] -= served
	return served
}

// finish ends the messages whose last byte has left the bottleneck, and
// retires connections with nothing left to send.
func (m *model) finish(tNS int64) {
	kept := m.active[:0]
	for _, ci := range m.active {
		c := &m.conns[ci]
		// A connection with nothing unsent or queued has delivered all it
		// was written, whatever the rounding of the sums of its steps'
		// bytes, which for a 10 MB message can exceed a µB.
		empty := c.unsent <= 1e-9 && c.queued <= 1e-9
		for len(c.pending) > 0 && (empty || c.pending[0].end <= c.delivered+1e-6) {
			m.ends[c.pending[0].flow] = tNS
			c.pending = c.pending[1:]
		}
		if len(c.pending) == 0 {
			c.active, c.unsent, c.queued = false, 0, 0
			continue
		}
		kept = append(kept, ci)
	}
	m.active = kept
}
