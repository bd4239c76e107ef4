package homa

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"slices"
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

	mu       sync.Mutex
	pacer    *transport.Pacer
	outgoing map[uint64]*outMsg
	// ready holds the outgoing messages that have a packet they may send
	// now (pending), fewest bytes left first, so that picking the next
	// packet takes the top, not a scan of every message: a sender the
	// CPU holds up collects many, and scanning them all for every packet
	// took 44 % of a sender's CPU (BenchmarkHomaCPUPerPacket's profile).
	ready readyHeap
	// waiting holds the other outgoing messages: all they may send has
	// gone, and they wait for a grant, a RESEND or DONE. Only these can
	// fall silent, so the retry timer looks at them, not at every message
	// (scanning all of them every tick took 25 % of an overloaded
	// sender's CPU).
	waiting  map[*outMsg]struct{}
	incoming map[uint64]*inMsg
	done     map[uint64]bool // messages received whole (duplicates are dropped)
	schedule map[uint64]transport.Message
	// doneRTT times DONEs from a message's last packet, for the sender's
	// silence timeout; grantRTT times grants to the packets they allowed,
	// for the receiver's resend timeout.
	doneRTT, grantRTT transport.RTTEstimator
	retrying          map[netip.Addr]int // messages awaiting an answer to a re-sent packet, by receiver
	stats             Stats
	// Every packet through the sockets, data and control, for the CPU
	// cost per packet (the pacer sends without the lock).
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
		done: map[uint64]bool{}, schedule: transport.ByID(sched), retrying: map[netip.Addr]int{}}
	e.pacer = transport.NewPacer(pacerLead, HeaderLen+e.mtuPay, dataSource{e})
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

// timers runs the receiver's and sender's timeouts every tick until ctx ends.
func (e *endpoint) timers(ctx context.Context) {
	// Every wake-up costs tens of µs on a virtual machine, times every
	// host: tick at half the timeout, so a stall is noticed within 1.5
	// timeouts.
	tick := time.NewTicker(max(time.Duration(e.args.ResendAfter)/2, time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			e.mu.Lock()
			e.resendStalled(now)
			e.retrySilent(now)
			e.mu.Unlock()
		}
	}
}

// sortedBy returns the keys of m ordered by less.
func sortedBy[K comparable, V any](m map[K]V, less func(a, b V) int) []V {
	out := make([]V, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	slices.SortFunc(out, less)
	return out
}
