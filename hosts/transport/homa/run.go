package homa

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"golang.org/x/sys/unix"

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
	sched, err := transport.ReadScheduleFile(env.Schedule)
	if err != nil {
		return err
	}
	prio, err := priorities(env, args, sched, log)
	if err != nil {
		return err
	}
	w, err := transport.OpenRecords(env.Records)
	if err != nil {
		return err
	}
	e := newEndpoint(env, args, prio, w, sched, log)
	if err := e.open(ctx); err != nil {
		e.close()
		return errors.Join(err, w.Close())
	}
	var wg sync.WaitGroup
	wg.Go(e.receive)
	wg.Go(func() { e.timers(ctx) })
	wg.Go(func() { e.pace(ctx) })
	if err := transport.Ready(stdout); err != nil {
		return err
	}
	out := transport.Outgoing(sched, env.Host)
	log.Info("homa", "sends", len(out), "rtt_bytes", args.RTTBytes, "unsched_levels", prio.Unscheduled,
		"cutoffs", prio.Cutoffs, "pacer", *args.Pacer)
	late := transport.Dispatch(ctx, env.Start(), env.Host, out, e.start)
	<-ctx.Done()
	e.close()
	wg.Wait()
	e.mu.Lock()
	st := e.stats
	e.mu.Unlock()
	pkts := e.pktsOut.Load() + e.pktsIn.Load()
	// Datagrams this host's full socket buffers dropped: an overloaded
	// receiver's loss, which no port counts.
	rcvbufDrops, err := snmp.UDP("RcvbufErrors")
	if err != nil {
		log.Warn("udp counters", "err", err)
	}
	log.Info("homa stats", "data_sent", st.DataSent, "data_recv", st.DataRecv, "dups", st.Dups, "grants", st.Grants,
		"resends", st.Resends, "busy", st.Busy, "retransmitted", st.Retransmitted, "first_resends", st.FirstResends,
		"max_active", st.MaxActive, "degree", prio.Scheduled(), "packets", pkts, "rcvbuf_drops", rcvbufDrops, "cpu_us", cpuTime().Microseconds())
	return errors.Join(w.Sender(late), w.Close())
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

// cpuTime is the CPU time this process has used, user and system.
func cpuTime() time.Duration {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
