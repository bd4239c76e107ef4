package tcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/fabric-emu/fabric/hosts/transport"
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
	sched, err := transport.ReadScheduleFile(env.Schedule)
	if err != nil {
		return err
	}
	w, err := transport.OpenRecords(env.Records)
	if err != nil {
		return err
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", net.JoinHostPort(env.Addr.String(), strconv.Itoa(args.Port)))
	if err != nil {
		return errors.Join(fmt.Errorf("listen: %w", err), w.Close())
	}
	rx := newReceiver(env, sched, w, log)
	rx.wg.Add(1)
	go func() { defer rx.wg.Done(); rx.serve(ctx, ln) }()
	if err := transport.Ready(stdout); err != nil {
		return err
	}
	out := transport.Outgoing(sched, env.Host)
	tx := newSender(ctx, env, args, log, out)
	log.Info("tcp transport", "host", env.Host, "sends", len(out), "receives", len(rx.incoming), "cc", args.CC,
		"conns", args.Conns, "start_in", time.Until(env.Start()).Round(time.Millisecond))
	late := transport.Dispatch(ctx, env.Start(), env.Host, out, tx.send)
	<-ctx.Done()
	ln.Close()
	tx.close()
	rx.close()
	return errors.Join(w.Sender(late), w.Close())
}
