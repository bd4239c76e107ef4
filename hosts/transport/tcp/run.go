package tcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/fabric-emu/fabric/hosts/transport"
	"github.com/fabric-emu/fabric/internal/snmp"
)

// Run is the transport's process on one host: it listens, prints the
// ready line, sends its part of the schedule open loop, records every
// message it receives, and returns when ctx ends (SIGTERM), having written
// its lateness and flushed its records.
func Run(ctx context.Context, env *transport.Env, stdout io.Writer, log *slog.Logger) error {
	args, err := parseArgs(env)
	if err != nil {
		return err
	}
	if err := args.ECN.apply(); err != nil {
		return err
	}
	return transport.Serve(ctx, env, stdout, func(ctx context.Context, sched []transport.Message, w *transport.Writer) (transport.Endpoint, error) {
		var lc net.ListenConfig
		ln, err := lc.Listen(ctx, "tcp", net.JoinHostPort(env.Addr.String(), strconv.Itoa(args.Port)))
		if err != nil {
			return nil, fmt.Errorf("listen: %w", err)
		}
		e := &endpoint{env: env, args: args, log: log, ln: ln, before: kernelCounts(log), segs0: segments(log), rx: newReceiver(env, sched, w, log)}
		loops, stop := context.WithCancel(ctx)
		e.stop = stop
		e.rx.wg.Add(1)
		go func() { defer e.rx.wg.Done(); e.rx.serve(loops, ln) }()
		return e, nil
	})
}

// endpoint is the kernel's TCP on one host, as transport.Serve runs it:
// the listener and its receiver, and once the schedule starts the sender.
type endpoint struct {
	env    *transport.Env
	args   Args
	log    *slog.Logger
	ln     net.Listener
	rx     *receiver
	tx     *sender
	stop   context.CancelFunc // the receiver's loops
	before []int64            // kernelCounts when the endpoint opened
	segs0  int64              // segments when the endpoint opened
	sends  atomic.Int64       // messages started
}

func (e *endpoint) Begin(ctx context.Context, out []transport.Message) func(transport.Message) {
	e.tx = newSender(ctx, e.env, e.args, e.log, out)
	e.log.Info("tcp transport", "host", e.env.Host, "sends", len(out), "receives", len(e.rx.incoming), "cc", e.args.CC,
		"conns", e.args.Conns, "start_in", time.Until(e.env.Start()).Round(time.Millisecond))
	return func(m transport.Message) {
		e.sends.Add(1)
		e.tx.send(m)
	}
}

// Close closes the listener, the sender's connections and the receiver's.
func (e *endpoint) Close() {
	e.ln.Close()
	if e.tx != nil {
		e.tx.close()
	}
	e.stop()
	e.rx.close()
}

// Finish logs the engine's CPU per message and writes what the host's
// kernel counted while the endpoint ran.
func (e *endpoint) Finish(w *transport.Writer) error {
	// The kernel's TCP does the per-packet work; this process's CPU per
	// message is what the engine around it costs.
	cpu, msgs := transport.CPUTime(), e.sends.Load()+e.rx.received.Load()
	e.log.Info("tcp stats", "messages_sent", e.sends.Load(), "messages_received", e.rx.received.Load(),
		"packets", segments(e.log)-e.segs0, "cpu_us", cpu.Microseconds(), "cpu_us_per_message", cpu.Microseconds()/max(msgs, 1))
	var counts []error
	for i, v := range kernelCounts(e.log) {
		c := kernelCounters[i]
		counts = append(counts, w.Metric(transport.Metric{Name: c.name, Value: float64(v - e.before[i]), Unit: c.unit}))
	}
	return errors.Join(counts...)
}

// kernelCounters are the TCP counters of the host's namespace (the
// host's alone) that the transport reports: the kernel's TCP is the
// transport, so they count what it did.
var kernelCounters = []struct {
	name, unit string
	read       func() (int, error)
}{
	{"retransmitted", "segments", func() (int, error) { return snmp.TCP("RetransSegs") }},
	{"rtos", "timeouts", func() (int, error) { return snmp.TCPExt("TCPTimeouts") }},
}

// kernelCounts reads kernelCounters (0 for one that cannot be read).
func kernelCounts(log *slog.Logger) []int64 {
	out := make([]int64, len(kernelCounters))
	for i, c := range kernelCounters {
		v, err := c.read()
		if err != nil {
			log.Warn("tcp counters", "counter", c.name, "err", err)
		}
		out[i] = int64(v)
	}
	return out
}

// segments counts the TCP segments this host has taken in and sent (the
// host's namespace's counters).
func segments(log *slog.Logger) int64 {
	var n int64
	for _, f := range []string{"InSegs", "OutSegs"} {
		v, err := snmp.TCP(f)
		if err != nil {
			log.Warn("tcp counters", "err", err)
		}
		n += int64(v)
	}
	return n
}
