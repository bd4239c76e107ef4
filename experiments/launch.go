package experiments

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/fabric-emu/fabric/emu"
	"github.com/fabric-emu/fabric/hosts"
	"github.com/fabric-emu/fabric/hosts/transport"
)

// How long transports get to print their ready line: the start instant is
// this far after they are launched. Containers start their commands
// through the daemon, more slowly. 2 s was too little: sixteen Homa
// transports starting while the machine's two cores were busy left one
// host's log empty after 2 s, and the whole full run stopped there.
//
// Host processes are first given readyFirstTry: nine TCP transports had
// all printed their ready lines within 90 ms of the first launch
// (swp/capacity quick, 2026-11-27, 9 trials: the last one's start_in),
// and the full allowance left every trial idle for ~5 s
// (a quarter of CI's time). Only when one is not ready by then are all
// of them stopped and launched again with the full allowance.
const (
	readyFirstTry        = time.Second
	readyAllowanceNetNS  = 5 * time.Second
	readyAllowanceDocker = 10 * time.Second
	// stopGrace is how long a transport may take to flush and exit after
	// SIGTERM before it is killed (by PID) and the trial is failed.
	stopGrace = 10 * time.Second
)

// startTransports writes each participant's schedule, starts its
// transport with the contract's environment, and waits for every ready
// line. The transports are stopped when the trial ends.
func (t *trial) startTransports(ctx context.Context) error {
	if err := t.plan.schedule.WriteFiles(t.epDir); err != nil {
		return fmt.Errorf("schedule: %w", err)
	}
	args, err := t.scheme.argsJSON(t.spec.Traffic)
	if err != nil {
		return err
	}
	if t.containers() {
		return t.launchTransports(ctx, args, readyAllowanceDocker)
	}
	err = t.launchTransports(ctx, args, readyFirstTry)
	var late *notReadyError
	if !errors.As(err, &late) {
		return err
	}
	t.opts.Log.Info("transports not ready within the first allowance; launching them again", "host", late.host, "allowance", readyFirstTry, "then", readyAllowanceNetNS)
	if err := t.withdrawTransports(); err != nil {
		return err
	}
	return t.launchTransports(ctx, args, readyAllowanceNetNS)
}

// launchTransports starts every participant's transport with a start
// instant allowance from now and waits for their ready lines; an error
// wrapping *notReadyError says one was still starting at that instant.
func (t *trial) launchTransports(ctx context.Context, args []byte, allowance time.Duration) error {
	t.startNS = time.Now().Add(allowance).UnixNano()
	for _, h := range t.plan.schedule.Participants() {
		pr, err := t.startTransport(ctx, h, args)
		if err != nil {
			return t.failure(h, err)
		}
		t.transports = append(t.transports, pr)
	}
	for _, pr := range t.transports {
		if err := awaitReady(ctx, pr, time.Unix(0, t.startNS)); err != nil {
			return t.failure(pr.host, err)
		}
	}
	return nil
}

// withdrawTransports stops the transports of a launch whose start instant
// was missed, before any message was due, and removes what they left
// (logs, empty records), so the next launch starts from nothing: the
// records and logs a trial keeps are one launch's.
func (t *trial) withdrawTransports() error {
	for _, pr := range t.transports {
		stopProc(pr, stopGrace)
	}
	for _, pr := range t.transports {
		for _, f := range []string{pr.log, filepath.Join(t.epDir, transport.FileName(pr.host))} {
			if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
	}
	t.argvs = t.argvs[:len(t.argvs)-len(t.transports)]
	t.transports = nil
	return nil
}

// notReadyError is a transport that had not printed its ready line by
// the start instant (it is still running).
type notReadyError struct {
	host string
	msg  string
}

func (e *notReadyError) Error() string { return e.msg }

// failure names the scheme and host a transport failed on.
func (t *trial) failure(host string, err error) error {
	return fmt.Errorf("scheme %s (transport %s), host %s: %w", t.point.Scheme, t.scheme.Transport.Name(), host, err)
}

func (t *trial) containers() bool { return !hosts.IsNetNS(t.lab.Spec.Hosts.Runtime) }

// startTransport starts the transport of one host.
func (t *trial) startTransport(ctx context.Context, host string, args []byte) (*proc, error) {
	h := t.lab.Host(host)
	ref, err := h.Ref()
	if err != nil {
		return nil, err
	}
	env := t.contractEnv(h, args)
	argv, err := t.transportArgv(ctx, ref, env)
	if err != nil {
		return nil, err
	}
	t.argvs = append(t.argvs, argv)
	logPath := filepath.Join(t.dir, "logs", host+".transport.log")
	p, err := hosts.StartCommand(ctx, ref, hosts.Command{Argv: argv, Env: env.Environ(), Log: logPath})
	if err != nil {
		return nil, err
	}
	pr := &proc{name: host + "/" + t.scheme.Transport.Name(), host: host, p: p, log: logPath}
	t.onCleanup(func() error { stopProc(pr, 5*time.Second); return nil })
	return pr, nil
}

// contractEnv is what the contract tells the transport of host h.
func (t *trial) contractEnv(h *emu.Host, args []byte) *transport.Env {
	var peers []transport.Peer
	for _, p := range t.lab.Hosts() {
		peers = append(peers, transport.Peer{Name: p.Name(), Addr: p.Addr()})
	}
	link := t.lab.Graph.Node(h.Name()).Ifaces[0].Link
	return &transport.Env{
		Contract: transport.Version, Host: h.Name(), Addr: h.Addr(), Peers: peers,
		Schedule: filepath.Join(t.epDir, transport.ScheduleFileName(h.Name())),
		Records:  filepath.Join(t.epDir, transport.FileName(h.Name())),
		RunDir:   t.epDir, StartNS: t.startNS, Duration: t.spec.Duration,
		LinkRate: int64(link.Rate), MTU: link.MTU, RTT: t.contractRTT,
		Seed: t.seed, Workload: t.spec.WorkloadOf(t.point), Args: args,
	}
}

// transportArgv is the command line of the scheme's transport on ref: a
// built-in's `fabric transport NAME`, the user's command with its
// placeholders filled in (a relative program path is the experiment
// file's neighbour), or the image's own command.
func (t *trial) transportArgv(ctx context.Context, ref hosts.Ref, env *transport.Env) ([]string, error) {
	tr := t.scheme.Transport
	switch {
	case len(tr.Command) > 0:
		argv := make([]string, len(tr.Command))
		for i, a := range tr.Command {
			argv[i] = env.Expand(a)
		}
		if !t.containers() && strings.Contains(argv[0], "/") && !filepath.IsAbs(argv[0]) && t.spec.File != "" {
			argv[0] = filepath.Join(filepath.Dir(t.spec.File), argv[0])
		}
		return argv, nil
	case tr.Image != "":
		return hosts.ImageCommand(ctx, tr.Image)
	}
	bin, err := hosts.FabricIn(ref)
	if err != nil {
		return nil, err
	}
	return []string{bin, "transport", tr.builtin()}, nil
}

// awaitReady waits for the ready line in a transport's log until deadline,
// failing when the process exits first.
func awaitReady(ctx context.Context, pr *proc, deadline time.Time) error {
	exited := make(chan error, 1)
	go func() { exited <- pr.p.Wait() }()
	for {
		if hasLine(pr.log, transport.ReadyLine) {
			return nil
		}
		select {
		case err := <-exited:
			return fmt.Errorf("exited before its ready line: %v (%s)", err, lastLine(pr.log))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return &notReadyError{host: pr.host, msg: fmt.Sprintf("no %q line on stdout by the start instant (%s)", transport.ReadyLine, lastLine(pr.log))}
		}
	}
}

// hasLine reports whether the file holds line on a line of its own.
func hasLine(path, line string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == line {
			return true
		}
	}
	return false
}

// runSchedule waits while the schedule runs, and for its drain time after
// it, failing early if a transport exits.
func (t *trial) runSchedule(ctx context.Context) error {
	end := time.Unix(0, t.startNS).Add(t.spec.Duration + t.drain())
	exited := make(chan *proc, len(t.transports))
	for _, pr := range t.transports {
		go func() {
			pr.p.Wait()
			exited <- pr
		}()
	}
	select {
	case pr := <-exited:
		return t.failure(pr.host, fmt.Errorf("exited during the trial, before SIGTERM (%s)", lastLine(pr.log)))
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Until(end)):
		return nil
	}
}

// drain is how long messages sent near the schedule's end get to arrive:
// none for long-lived flows, which run until SIGTERM.
func (t *trial) drain() time.Duration { return t.spec.drainTime() }

// drainTime is how long after the schedule's end messages may finish.
func (s *Spec) drainTime() time.Duration {
	switch s.Traffic.Pattern {
	case "static", "permutation":
		return 0
	}
	return min(max(s.Duration/3, 2*time.Second), 10*time.Second)
}

// stopTransports sends every transport (and the probe sink) SIGTERM and
// waits for it to flush and exit; one that does not within stopGrace is
// killed and named.
func (t *trial) stopTransports() error {
	procs := t.transports
	if t.probeSink != nil {
		procs = append(procs[:len(procs):len(procs)], t.probeSink)
	}
	for _, pr := range procs {
		pr.p.Signal(syscall.SIGTERM)
	}
	var errs []error
	for _, pr := range procs {
		if err := waitTimeout(pr, stopGrace); err != nil {
			errs = append(errs, t.failure(pr.host, fmt.Errorf("%v after SIGTERM (%s)", err, lastLine(pr.log))))
		}
	}
	return errors.Join(errs...)
}

// startProbe starts the LMM's probe stream of measure.probe, if any: a
// sink on its destination now (ready before the schedule starts), and the
// sender when the schedule starts, for the schedule's duration. Both run
// next to the transports and are stopped with them.
func (t *trial) startProbeSink(ctx context.Context) error {
	pr := t.spec.Measure.Probe
	if pr == nil {
		return nil
	}
	to := t.lab.Host(pr.To)
	records := filepath.Join(t.epDir, transport.FileName(pr.To+".probe"))
	p, err := t.startFabric(ctx, to, "probe-sink", []string{"endpoint", "probe-sink", "--host", pr.To, "--addr", to.Addr().String(), "--records", records})
	if err != nil {
		return err
	}
	t.probeSink = p
	return awaitReady(ctx, p, time.Now().Add(readyAllowanceNetNS))
}

// startProbe starts the probe sender of measure.probe, if any.
func (t *trial) startProbe(ctx context.Context) error {
	pr := t.spec.Measure.Probe
	if pr == nil {
		return nil
	}
	_, err := t.startFabric(ctx, t.lab.Host(pr.From), "probe", []string{"endpoint", "probe", "--host", pr.From,
		"--to", t.lab.Host(pr.To).Addr().String(), "--dscp", "CS0", "--duration", t.spec.Duration.String()})
	return err
}

// startFabric starts `fabric args…` on host h as one of the trial's
// processes (stopped when the trial ends); role names its log.
func (t *trial) startFabric(ctx context.Context, h *emu.Host, role string, args []string) (*proc, error) {
	ref, err := h.Ref()
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(t.dir, "logs", h.Name()+"."+role+".log")
	p, err := hosts.StartFabric(ctx, ref, args, logPath)
	if err != nil {
		return nil, err
	}
	t.argvs = append(t.argvs, args)
	pr := &proc{name: h.Name() + "/" + role, host: h.Name(), p: p, log: logPath}
	t.onCleanup(func() error { stopProc(pr, 5*time.Second); return nil })
	return pr, nil
}
