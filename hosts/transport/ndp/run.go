package ndp

import (
	"context"
	"errors"
	"io"
	"log/slog"

	"github.com/fabric-emu/fabric/hosts/transport"
)

// Run is NDP's process on one host under the transport contract: it
// listens, prints the ready line, starts each of its messages at its time,
// receives and records the messages sent to it, and returns when ctx ends
// (SIGTERM) with its records flushed.
func Run(ctx context.Context, env *transport.Env, stdout io.Writer, log *slog.Logger) error {
	p, err := Open(ctx, env, log, nil)
	if err != nil {
		return err
	}
	return p.Run(ctx, stdout)
}

// Proc is NDP on one host, opened as Run opens it and not yet running, for
// tests that run every host's endpoint of a lab in their own process.
type Proc struct {
	*transport.Proc
	s *served
}

// Open reads the schedule, opens the records and the sockets (in the
// calling thread's network namespace) and starts the endpoint's loops;
// deliver, if not nil, is the application that receives the messages'
// bytes (tests), which Payload says.
func Open(ctx context.Context, env *transport.Env, log *slog.Logger, deliver func(id uint64, off int64, b []byte)) (*Proc, error) {
	args, err := parseArgs(env)
	if err != nil {
		return nil, err
	}
	var s *served
	p, err := transport.Open(ctx, env, func(ctx context.Context, sched []transport.Message, w *transport.Writer) (transport.Endpoint, error) {
		e := newEndpoint(env, args, w, sched, log)
		e.deliver = deliver
		if err := e.open(ctx); err != nil {
			e.close()
			return nil, err
		}
		s = &served{e, transport.StartLoops(e.close, func(context.Context) { e.receive() }, e.timers, e.sendLoop, e.pullLoop)}
		return s, nil
	})
	if err != nil {
		return nil, err
	}
	return &Proc{Proc: p, s: s}, nil
}

// Stats are the endpoint's counters so far.
func (p *Proc) Stats() Stats {
	e := p.s.e
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.stats
}

// Packets counts every packet through the endpoint's sockets so far, data
// and control, sent or received.
func (p *Proc) Packets() int64 { return p.s.e.pktsOut.Load() + p.s.e.pktsIn.Load() }

// Payload writes into b the bytes message id carries from offset off, which
// a receiving application (Open's deliver) can check it got.
func Payload(b []byte, id uint64, off int64) { fill(b, id, off) }

// served is NDP's endpoint as transport.Serve runs it, with the loops
// that Close stops.
type served struct {
	e *endpoint
	*transport.Loops
}

func (s *served) Begin(_ context.Context, out []transport.Message) func(transport.Message) {
	e := s.e
	e.log.Info("ndp", "host", e.env.Host, "sends", len(out), "iw_packets", e.iw, "paths", e.args.Paths,
		"rto", e.rto, "pull_gap", e.gap)
	return e.start
}

// Finish ends the streams (their flow records), then logs and writes the
// counters.
func (s *served) Finish(w *transport.Writer) error {
	e := s.e
	e.mu.Lock()
	e.endStreams()
	st := e.stats
	e.mu.Unlock()
	e.log.Info("ndp stats", "data_sent", st.DataSent, "retransmitted", st.Retransmitted, "rtos", st.RTOs,
		"nacks_recv", st.NacksRecv, "stale_nacks", st.StaleNacks, "pulls_recv", st.PullsRecv, "data_recv", st.DataRecv, "trims", st.Trims,
		"dups", st.Dups, "nacks", st.Nacks, "pulls", st.Pulls, "pull_acks", st.PullAcks, "pull_retries", st.PullRetries,
		"delivered", st.Delivered, "packets", e.pktsOut.Load()+e.pktsIn.Load(), "cpu_us", transport.CPUTime().Microseconds())
	return errors.Join(w.Counts("packets", map[string]int64{"data_sent": st.DataSent, "retransmitted": st.Retransmitted,
		"nacks": st.Nacks, "trims": st.Trims, "pulls": st.Pulls, "pull_retries": st.PullRetries, "duplicates": st.Dups}),
		w.Counts("timeouts", map[string]int64{"rtos": st.RTOs}))
}
