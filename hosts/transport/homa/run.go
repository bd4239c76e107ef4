package homa

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/fabric-emu/fabric/hosts/transport"
	"github.com/fabric-emu/fabric/hosts/workload"
	"github.com/fabric-emu/fabric/internal/snmp"
)

// Run is Homa's process on one host under the transport contract: it
// listens, prints the ready line, starts each of its messages at its time,
// receives and records the messages sent to it, and returns when ctx ends
// (SIGTERM) with its records flushed.
func Run(ctx context.Context, env *transport.Env, stdout io.Writer, log *slog.Logger) error {
	args, err := parseArgs(env)
	if err != nil {
		return err
	}
	return transport.Serve(ctx, env, stdout, func(ctx context.Context, sched []transport.Message, w *transport.Writer) (transport.Endpoint, error) {
		prio, err := priorities(env, args, sched, log)
		if err != nil {
			return nil, err
		}
		e := newEndpoint(env, args, prio, w, sched, log)
		if err := e.open(ctx); err != nil {
			e.close()
			return nil, err
		}
		return &served{e, transport.StartLoops(e.close, func(context.Context) { e.receive() }, e.timers, e.pace)}, nil
	})
}

// served is Homa's endpoint as transport.Serve runs it, with the loops
// that Close stops.
type served struct {
	e *endpoint
	*transport.Loops
}

func (s *served) Begin(_ context.Context, out []transport.Message) func(transport.Message) {
	e := s.e
	e.log.Info("homa", "sends", len(out), "rtt_bytes", e.args.RTTBytes, "unsched_levels", e.prio.Unscheduled,
		"cutoffs", e.prio.Cutoffs, "pacer", *e.args.Pacer)
	return e.start
}

// Finish logs and writes the counters.
func (s *served) Finish(w *transport.Writer) error {
	e := s.e
	e.mu.Lock()
	st := e.stats
	e.mu.Unlock()
	pkts := e.pktsOut.Load() + e.pktsIn.Load()
	// Datagrams this host's full socket buffers dropped: an overloaded
	// receiver's loss, which no port counts.
	rcvbufDrops, err := snmp.UDP("RcvbufErrors")
	if err != nil {
		e.log.Warn("udp counters", "err", err)
	}
	e.log.Info("homa stats", "data_sent", st.DataSent, "data_recv", st.DataRecv, "dups", st.Dups, "grants", st.Grants,
		"resends", st.Resends, "busy", st.Busy, "retransmitted", st.Retransmitted, "first_resends", st.FirstResends,
		"max_active", st.MaxActive, "degree", e.prio.Scheduled(), "packets", pkts, "rcvbuf_drops", rcvbufDrops, "cpu_us", transport.CPUTime().Microseconds())
	return errors.Join(w.Counts("packets", map[string]int64{"data_sent": st.DataSent, "retransmitted": st.Retransmitted,
		"duplicates": st.Dups, "grants": st.Grants, "resends": st.Resends, "busy": st.Busy}),
		w.Counts("datagrams", map[string]int64{"rcvbuf_drops": int64(rcvbufDrops)}))
}

// priorities derives the cut-offs from the experiment's workload, or, when
// it names none, from the sizes in this host's schedule.
func priorities(env *transport.Env, args Args, sched []transport.Message, log *slog.Logger) (Priorities, error) {
	if env.Workload != "" {
		cdf, err := workload.Open(env.Workload, nil)
		if err != nil {
			return Priorities{}, fmt.Errorf("workload: %w", err)
		}
		return PrioritiesFor(cdf, args.RTTBytes, payloadSize(env.MTU), args.UnschedLevels), nil
	}
	var sizes []int64
	for _, m := range sched {
		if !m.Stream && m.Size > 0 {
			sizes = append(sizes, m.Size)
		}
	}
	log.Info("no workload named: priority cut-offs from this host's schedule", "messages", len(sizes))
	if len(sizes) == 0 {
		return Priorities{Unscheduled: max(args.UnschedLevels, 1), Cutoffs: make([]int64, max(args.UnschedLevels, 1)-1)}, nil
	}
	return prioritiesOfSizes(sizes, args.RTTBytes, payloadSize(env.MTU), args.UnschedLevels), nil
}
