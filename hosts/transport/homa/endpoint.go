package homa

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fabric-emu/fabric/hosts/transport"
)

// endpoint is Homa on one host: the sender and receiver halves share one
// lock and one set of sockets. Packets leave through one UDP socket per
// priority (its TOS carries the priority as DSCP CS<p>, which fabric's
// ports map to their strict bands); they arrive on one socket.
type endpoint struct {
	env    *transport.Env
	args   Args
	prio   Priorities
	log    *slog.Logger
	w      *transport.Writer
	mtuPay int // message bytes per packet

	in   *net.UDPConn
	out  [Levels]*net.UDPConn
	port int
	// tx puts one packet on the wire to dst at priority p: the sockets'
	// write (open sets it), or a test's network.
	tx func(dst netip.Addr, p uint8, b []byte)

	mu        sync.Mutex
	spacer    *transport.Spacer
	timerWake transport.Wake // a message began: the timers have work again
	outgoing  map[uint64]*outMsg
	// ready holds the outgoing messages that have a packet they may send
	// now (pending), fewest bytes left first, so that picking the next
	// packet takes the top, not a scan of every message: a sender the
	// CPU holds up collects many, and a scan per packet would cost most
	// when the sender is already behind.
	ready readyHeap
	// waiting holds the other outgoing messages: all they may send has
	// gone, and they wait for a grant, a RESEND or DONE. Only these can
	// fall silent, so the retry timer looks at them, not at every message
	// (a scan of all of them every tick is what an overloaded sender can
	// least afford).
	waiting  map[*outMsg]struct{}
	incoming map[uint64]*inMsg
	// grants ranks the incoming messages that need grants, for the
	// receiver's scheduler (grant).
	grants   grantQueue
	done     map[uint64]bool // messages received whole (duplicates are dropped)
	schedule map[uint64]transport.Message
	// doneRTT times DONEs from a message's last packet, for the sender's
	// silence timeout; grantRTT times grants to the packets they allowed,
	// for the receiver's resend timeout.
	doneRTT, grantRTT transport.RTTEstimator
	retrying          map[netip.Addr]int // messages awaiting an answer to a re-sent packet, by receiver
	stats             Stats
	// Every packet through the sockets, data and control, for the CPU
	// cost per packet (the spacer sends without the lock).
	pktsOut, pktsIn atomic.Int64
}

// Stats are an endpoint's counters, logged at exit.
type Stats struct {
	DataSent, DataRecv, Dups    int64
	Grants, Resends, Busy       int64
	MaxActive                   int // the most messages granted at once (≤ the degree of overcommitment)
	Retransmitted, FirstResends int64
}

func newEndpoint(env *transport.Env, args Args, prio Priorities, w *transport.Writer, sched []transport.Message, log *slog.Logger) *endpoint {
	e := &endpoint{env: env, args: args, prio: prio, log: log, w: w, mtuPay: payloadSize(env.MTU), port: args.Port,
		outgoing: map[uint64]*outMsg{}, waiting: map[*outMsg]struct{}{}, incoming: map[uint64]*inMsg{},
		done: map[uint64]bool{}, schedule: transport.ByID(sched), retrying: map[netip.Addr]int{},
		grants: newGrantQueue(prio.Scheduled()), timerWake: transport.NewWake()}
	e.spacer = transport.NewSpacer(pacerLead, HeaderLen+e.mtuPay, dataSource{e})
	return e
}

// open binds the receiving socket and one sending socket per priority.
func (e *endpoint) open(ctx context.Context) error {
	var err error
	if e.in, err = transport.ListenUDP(ctx, e.env.Addr, e.port); err != nil {
		return err
	}
	for p := range Levels {
		// Priority p is DSCP CS<p>, which the 8-band ports classify.
		if e.out[p], err = transport.SendUDP(ctx, e.env.Addr, transport.DSCP(p<<3), 4<<20); err != nil {
			return err
		}
	}
	e.tx = e.sendUDP
	return nil
}

func (e *endpoint) close() {
	if e.in != nil {
		e.in.Close()
	}
	for _, c := range e.out {
		if c != nil {
			c.Close()
		}
	}
}

// sendUDP writes one packet to addr through priority p's socket.
func (e *endpoint) sendUDP(addr netip.Addr, p uint8, b []byte) {
	e.pktsOut.Add(1)
	_, err := e.out[min(int(p), Levels-1)].WriteToUDPAddrPort(b, netip.AddrPortFrom(addr, uint16(e.port)))
	if err != nil {
		e.log.Debug("send", "to", addr, "err", err)
	}
}

// control sends a control packet (GRANT, RESEND, BUSY, DONE) at the
// highest priority: they are small and pace the data.
func (e *endpoint) control(addr netip.Addr, h header) {
	var b [HeaderLen]byte
	h.put(b[:])
	e.tx(addr, Levels-1, b[:])
}

// receive reads packets until the socket closes.
func (e *endpoint) receive() { transport.ReadPackets(e.in, &e.pktsIn, e.handle) }

// handle takes one packet from src.
func (e *endpoint) handle(src netip.Addr, b []byte) {
	h, err := parseHeader(b)
	if err != nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	switch h.typ {
	case typeData:
		e.onData(src, h, time.Now())
	case typeGrant, typeResend, typeBusy, typeDone:
		e.onControl(src, h, time.Now())
	}
}

// timers runs the receiver's and sender's timeouts until ctx ends, while
// a message is being sent or received: with none there is nothing to time,
// and they sleep until one begins (TestTimersSleepWhileIdle).
func (e *endpoint) timers(ctx context.Context) {
	// Every wake-up costs tens of µs on a virtual machine, times every
	// host: tick at half the timeout, so a stall is noticed within 1.5
	// timeouts.
	timeouts := transport.Job{Every: max(time.Duration(e.args.ResendAfter)/2, time.Millisecond), Run: func(now time.Time) {
		e.mu.Lock()
		e.resendStalled(now)
		e.retrySilent(now)
		e.mu.Unlock()
	}}
	transport.RunWhileBusy(ctx, e.timerWake, e.busy, timeouts)
}

// busy says whether a message is being sent or received.
func (e *endpoint) busy() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.outgoing) > 0 || len(e.incoming) > 0
}
