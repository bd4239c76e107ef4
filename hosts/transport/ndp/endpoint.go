package ndp

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fabric-emu/fabric/hosts/transport"
	"github.com/fabric-emu/fabric/tc"
)

// endpoint is NDP on one host: the sender and receiver halves share one
// lock and one set of sockets. DATA leaves from Args.Paths source ports in
// turn through one raw socket (the spray, spray.go); ACK, NACK and PULL
// through one control socket marked DSCP CS7; everything arrives on one socket bound
// to Args.Port.
type endpoint struct {
	env  *transport.Env
	args Args
	log  *slog.Logger
	w    *transport.Writer
	pay  int           // message bytes per packet
	iw   uint32        // the initial window in packets
	rto  time.Duration // the least timeout (Args.RTO); rtt raises it to what the path takes
	rtt  transport.RTTEstimator
	gap  time.Duration // one full-size packet's time on this host's link: the PULL spacing
	port int

	in   *net.UDPConn
	ctl  *net.UDPConn
	data *sprayer
	// tx puts one packet on the wire to dst: DATA through source port
	// path (0..Paths-1), control (path -1) through the CS7 socket. The
	// sockets' write (open sets it), or a test's network.
	tx func(dst netip.Addr, path int, b []byte)
	// deliver, when set, receives every message's bytes in order, exactly
	// once: the application's side of the socket (tests check it).
	deliver func(id uint64, off int64, b []byte)

	mu         sync.Mutex
	sendSpacer *transport.Spacer // DATA
	pullSpacer *transport.Spacer // PULLs
	timerWake  transport.Wake    // a message began: the timers have work again
	outgoing   map[uint64]*outMsg
	order      []*outMsg // outgoing in the order they are served, round robin
	rr         int
	spray      int
	incoming   map[uint64]*inMsg
	done       map[uint64]bool // messages delivered whole (duplicates are ACKed, not delivered)
	pulls      pullQueue
	schedule   map[uint64]transport.Message
	stats      Stats
	// Every packet through the sockets, data and control, for the CPU
	// cost per packet (the pacers send without the lock).
	pktsOut, pktsIn atomic.Int64
}

// Stats are an endpoint's counters, logged at exit.
type Stats struct {
	DataSent, Retransmitted, RTOs    int64 // sender: DATA packets, of which resent, of which after a timeout
	NacksRecv, PullsRecv, StaleNacks int64 // StaleNacks: NACKs of a copy already resent
	DataRecv, Trims, Dups            int64 // receiver: DATA arrivals, CHOPPED among them, duplicates
	Nacks, Pulls, PullRetries        int64 // receiver: NACKs sent, PULLs sent, PULLs repeated on a timeout
	PullAcks                         int64 // PULLs that also ACKed the packet that earned them
	Delivered                        int64 // messages delivered whole
}

func newEndpoint(env *transport.Env, args Args, w *transport.Writer, sched []transport.Message, log *slog.Logger) *endpoint {
	pay := payloadSize(env.MTU)
	e := &endpoint{env: env, args: args, log: log, w: w, pay: pay, port: args.Port,
		iw: packets(int64(args.IW), pay), rto: time.Duration(args.RTO), gap: frameTime(env, env.MTU),
		timerWake: transport.NewWake(),
		outgoing:  map[uint64]*outMsg{}, incoming: map[uint64]*inMsg{}, done: map[uint64]bool{},
		pulls: newPullQueue(), schedule: transport.ByID(sched)}
	// A spacer may hand a packet over up to its own time early (MaxLead
	// 0), making up for a late wake-up.
	e.sendSpacer = transport.NewSpacer(0, HeaderLen+pay, dataSource{e})
	e.pullSpacer = transport.NewSpacer(0, HeaderLen, pullSource{e})
	return e
}

// open binds the receiving socket, the control socket and one DATA socket
// per path; call it inside the host's network namespace.
func (e *endpoint) open(ctx context.Context) error {
	var err error
	if e.in, err = transport.ListenUDP(ctx, e.env.Addr, e.port); err != nil {
		return err
	}
	if e.ctl, err = transport.SendUDP(ctx, e.env.Addr, transport.DSCP(tc.DSCPHeader), 1<<20); err != nil {
		return err
	}
	if e.data, err = openSprayer(ctx, e.env.Addr, e.port); err != nil {
		return err
	}
	e.tx = e.sendUDP
	return nil
}

func (e *endpoint) close() {
	for _, c := range []*net.UDPConn{e.in, e.ctl} {
		if c != nil {
			c.Close()
		}
	}
	if e.data != nil {
		e.data.close()
	}
}

// sendUDP writes one packet to dst: DATA from the source port of its path,
// control through the CS7 socket.
func (e *endpoint) sendUDP(dst netip.Addr, path int, b []byte) {
	e.pktsOut.Add(1)
	var err error
	if path >= 0 {
		err = e.data.send(dst, path, b)
	} else {
		_, err = e.ctl.WriteToUDPAddrPort(b, netip.AddrPortFrom(dst, uint16(e.port)))
	}
	if err != nil {
		e.log.Debug("send", "to", dst, "err", err)
	}
}

// control sends an ACK, NACK or PULL.
func (e *endpoint) control(dst netip.Addr, h header) {
	var b [HeaderLen]byte
	h.put(b[:])
	e.tx(dst, -1, b[:])
}

// receive reads packets until the socket closes.
func (e *endpoint) receive() { transport.ReadPackets(e.in, &e.pktsIn, e.handle) }

// handle takes one packet from src.
func (e *endpoint) handle(src netip.Addr, b []byte) {
	h, err := parseHeader(b)
	if err != nil {
		return
	}
	now := time.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case h.flags&flagData != 0:
		e.onData(src, h, b[HeaderLen:], now)
	case h.flags&flagPull != 0:
		e.onPull(h)
	case h.flags&(flagAck|flagNack) != 0:
		e.onAck(h, now)
	}
}

// timers runs the sender's and receiver's timeouts until ctx ends, while
// a message is on its way either way: with none there is nothing to time,
// and they sleep until one begins (TestIdleEndpointsSleep).
func (e *endpoint) timers(ctx context.Context) {
	// Tick at half the timeout, so a stall is noticed within 1.5
	// timeouts, but no faster than every 5 ms: wake-ups cost CPU on a
	// virtual machine, times every host.
	timeouts := transport.Job{Every: max(e.rto/2, 5*time.Millisecond), Run: func(now time.Time) {
		e.mu.Lock()
		e.retransmitTimedOut(now)
		e.repeatStalledPulls(now)
		e.mu.Unlock()
	}}
	samples := transport.Job{Every: sampleEvery, Run: func(now time.Time) {
		e.mu.Lock()
		e.sampleStreams(now)
		e.mu.Unlock()
	}}
	transport.RunWhileBusy(ctx, e.timerWake, func() bool { return !e.idle() }, timeouts, samples)
}

// idle says whether no message is being sent or received.
func (e *endpoint) idle() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.outgoing) == 0 && len(e.incoming) == 0
}

// sampleEvery is how often a receiver samples its streams (the contract's
// sample record: every 100 ms).
const sampleEvery = 100 * time.Millisecond
