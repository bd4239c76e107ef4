package transport

import (
	"context"
	"errors"
	"io"
	"sync"
)

// An Endpoint is a transport on one host, open: its sockets bound in the
// host's network namespace and its loops running. Serve runs its life; a
// Go transport supplies only what is its own.
type Endpoint interface {
	// Begin is called once the ready line is out, with the messages this
	// host sends; it logs what the endpoint is about to do and returns
	// what starts one of them, which Dispatch calls at the message's time.
	Begin(ctx context.Context, out []Message) (start func(Message))
	// Close stops the endpoint's loops and closes its sockets: when ctx
	// ends, or at once when the ready line cannot be written. Nothing is
	// started after it.
	Close()
	// Finish, after Close, logs the endpoint's counters and writes them
	// to w (Metric records).
	Finish(w *Writer) error
}

// An Opener opens a transport's endpoint for the host's schedule, its
// records going to w, in the calling thread's network namespace.
type Opener func(ctx context.Context, sched []Message, w *Writer) (Endpoint, error)

// Proc is a transport process opened and not yet running: Open's result.
// Tests open one per host of a lab, each inside its host's namespace, and
// run them all from one process.
type Proc struct {
	env   *Env
	sched []Message
	w     *Writer
	ep    Endpoint
}

// Open reads env's schedule, opens its records and then the endpoint, in
// the calling thread's network namespace. On an error it closes the
// records it opened.
func Open(ctx context.Context, env *Env, open Opener) (*Proc, error) {
	sched, err := ReadScheduleFile(env.Schedule)
	if err != nil {
		return nil, err
	}
	w, err := OpenRecords(env.Records)
	if err != nil {
		return nil, err
	}
	ep, err := open(ctx, sched, w)
	if err != nil {
		return nil, errors.Join(err, w.Close())
	}
	return &Proc{env: env, sched: sched, w: w, ep: ep}, nil
}

// Run prints the ready line on stdout, starts each of this host's
// messages at its time, and when ctx ends (SIGTERM) closes the endpoint,
// writes its counters and the host's lateness (a Sender record) and
// closes the records.
func (p *Proc) Run(ctx context.Context, stdout io.Writer) error {
	if err := Ready(stdout); err != nil {
		p.ep.Close()
		return errors.Join(err, p.w.Close())
	}
	p.w.WriteThroughFrom(p.env.Start().Add(p.env.Duration))
	out := Outgoing(p.sched, p.env.Host)
	late := Dispatch(ctx, p.env.Start(), p.env.Host, out, p.ep.Begin(ctx, out))
	<-ctx.Done()
	p.ep.Close()
	return errors.Join(p.ep.Finish(p.w), p.w.Sender(late), p.w.Close())
}

// Serve is a transport process's whole life under the contract: Open,
// then Run until ctx ends.
func Serve(ctx context.Context, env *Env, stdout io.Writer, open Opener) error {
	p, err := Open(ctx, env, open)
	if err != nil {
		return err
	}
	return p.Run(ctx, stdout)
}

// Loops are an endpoint's goroutines (receiving, timers, pacing) and the
// sockets they read: an Endpoint that embeds them has its Close.
type Loops struct {
	stop         context.CancelFunc
	closeSockets func()
	wg           sync.WaitGroup
}

// StartLoops runs each of loops on a goroutine of its own until Close; a
// loop returns when its context ends or when closeSockets closes what it
// reads.
func StartLoops(closeSockets func(), loops ...func(ctx context.Context)) *Loops {
	ctx, stop := context.WithCancel(context.Background())
	l := &Loops{stop: stop, closeSockets: closeSockets}
	for _, loop := range loops {
		l.wg.Go(func() { loop(ctx) })
	}
	return l
}

// Close ends the loops' context, closes the sockets and waits for every
// loop to return.
func (l *Loops) Close() {
	l.stop()
	l.closeSockets()
	l.wg.Wait()
}
