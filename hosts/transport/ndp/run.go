package ndp

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fabric-emu/fabric/hosts/transport"
)

// Run is NDP's process on one host under the transport contract: it
// listens, prints the ready line, starts each of its messages at its time,
// receives and records the messages sent to it, and returns when ctx ends
// (SIGTERM) with its records flushed.
func Run(ctx context.Context, env *transport.Env, stdout io.Writer, log *slog.Logger) error {
	p, err := open(ctx, env, log, nil)
	if err != nil {
		return err
	}
	return p.run(ctx, stdout)
}

// proc is a running NDP endpoint with its schedule and records.
type proc struct {
	e     *endpoint
	sched []transport.Message
	wg    sync.WaitGroup
	stop  context.CancelFunc
}

// open reads the schedule, opens the records and the sockets (in the
// calling thread's network namespace) and starts the endpoint's loops;
// deliver, if not nil, is the application that receives the messages'
// bytes (tests).
func open(ctx context.Context, env *transport.Env, log *slog.Logger, deliver func(id uint64, off int64, b []byte)) (*proc, error) {
	args, err := parseArgs(env)
	if err != nil {
		return nil, err
	}
	sched, err := transport.ReadScheduleFile(env.Schedule)
	if err != nil {
		return nil, err
	}
	w, err := transport.OpenRecords(env.Records)
	if err != nil {
		return nil, err
	}
	e := newEndpoint(env, args, w, sched, log)
	e.deliver = deliver
	if err := e.open(ctx); err != nil {
		e.close()
		return nil, errors.Join(err, w.Close())
	}
	loops, stop := context.WithCancel(context.Background())
	p := &proc{e: e, sched: sched, stop: stop}
	p.wg.Go(e.receive)
	p.wg.Go(func() { e.timers(loops) })
	p.wg.Go(func() { e.sendLoop(loops) })
	p.wg.Go(func() { e.pullLoop(loops) })
	return p, nil
}

// run prints the ready line, sends the schedule and, when ctx ends, stops
// the endpoint, logs its stats and closes the records.
func (p *proc) run(ctx context.Context, stdout io.Writer) error {
	e, env := p.e, p.e.env
	if err := transport.Ready(stdout); err != nil {
		p.shutdown()
		return errors.Join(err, e.w.Close())
	}
	out := transport.Outgoing(p.sched, env.Host)
	e.log.Info("ndp", "host", env.Host, "sends", len(out), "iw_packets", e.iw, "paths", e.args.Paths,
		"rto", e.rto, "pull_gap", e.gap)
	late := transport.Dispatch(ctx, env.Start(), env.Host, out, e.start)
	<-ctx.Done()
	p.shutdown()
	e.mu.Lock()
	e.endStreams()
	st := e.stats
	e.mu.Unlock()
	e.log.Info("ndp stats", "data_sent", st.DataSent, "retransmitted", st.Retransmitted, "rtos", st.RTOs,
		"nacks_recv", st.NacksRecv, "stale_nacks", st.StaleNacks, "pulls_recv", st.PullsRecv, "data_recv", st.DataRecv, "trims", st.Trims,
		"dups", st.Dups, "nacks", st.Nacks, "pulls", st.Pulls, "pull_acks", st.PullAcks, "pull_retries", st.PullRetries,
		"delivered", st.Delivered, "packets", e.pktsOut.Load()+e.pktsIn.Load(), "cpu_us", cpuTime().Microseconds())
	return errors.Join(e.w.Sender(late), e.w.Close())
}

// shutdown stops the loops and closes the sockets.
func (p *proc) shutdown() {
	p.stop()
	p.e.close()
	p.wg.Wait()
}

// cpuTime is the CPU time this process has used, user and system.
func cpuTime() time.Duration {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
