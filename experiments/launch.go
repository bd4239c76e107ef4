package experiments

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fabric-emu/fabric/emu"
	"github.com/fabric-emu/fabric/hosts"
	"github.com/fabric-emu/fabric/hosts/transport"
)

// How long transports get to print their ready line: the start instant is
// this far after they are launched, unless the scheme sets ready_timeout.
// Containers start their commands through the daemon, more slowly, and a
// busy machine can hold a host's transport back by seconds, so the
// allowance is generous.
//
// Host processes are first given readyFirstTry (readyFirstTryBuiltin for
// fabric's own transports, this binary started on every host: their
// slowest ready line came 51-131 ms after the launch on labs of 8 to 16
// hosts here, so three times that), which is usually enough, so that a
// trial does not sit idle through the whole allowance; only when one is
// not ready by then are all of them stopped and launched again with
// readyAllowanceNetNS, which an interpreter started on every host at once
// needs (docs/transport-contract.md has the measurement).
const (
	readyFirstTry        = time.Second
	readyFirstTryBuiltin = 400 * time.Millisecond
	readyAllowanceNetNS  = 10 * time.Second
	readyAllowanceDocker = 10 * time.Second
	// cleanupGrace is the grace for processes a failed trial leaves.
	cleanupGrace = 5 * time.Second
	// defaultStopGrace is how long transports may take to flush and exit
	// after SIGTERM before they are killed (by PID) and the trial is
	// failed, unless the scheme sets stop_grace: the contract's 10 s.
	defaultStopGrace = 10 * time.Second
)

// stopGrace is the scheme's grace after SIGTERM.
func (t *trial) stopGrace() time.Duration {
	if t.scheme.StopGrace > 0 {
		return time.Duration(t.scheme.StopGrace)
	}
	return defaultStopGrace
}

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
	switch {
	case t.scheme.ReadyTimeout > 0:
		return t.launchTransports(ctx, args, time.Duration(t.scheme.ReadyTimeout))
	case t.containers():
		return t.launchTransports(ctx, args, readyAllowanceDocker)
	}
	first := readyFirstTry
	if t.scheme.Transport.builtin() != "" {
		first = readyFirstTryBuiltin
	}
	err = t.launchTransports(ctx, args, first)
	var late *notReadyError
	if !errors.As(err, &late) {
		return err
	}
	t.opts.Log.Info("transports not ready within the first allowance; launching them again", "host", late.host, "allowance", first, "then", readyAllowanceNetNS)
	if err := t.withdrawTransports(); err != nil {
		return err
	}
	return t.launchTransports(ctx, args, readyAllowanceNetNS)
}

// launchTransports starts every participant's transport with a start
// instant allowance from now and waits for their ready lines; an error
// wrapping *notReadyError says one was still starting at that instant.
func (t *trial) launchTransports(ctx context.Context, args []byte, allowance time.Duration) error {
	t.startNS, t.allowance = time.Now().Add(allowance).UnixNano(), allowance
	for _, h := range t.plan.schedule.Participants() {
		pr, err := t.startTransport(ctx, h, args)
		if err != nil {
			return t.failure(h, err)
		}
		t.transports = append(t.transports, pr)
	}
	return t.awaitReady(ctx, t.transports, time.Unix(0, t.startNS))
}

// withdrawTransports stops the transports of a launch whose start instant
// was missed, before any message was due, and removes what they left
// (logs, empty records), so the next launch starts from nothing: the
// records and logs a trial keeps are one launch's.
func (t *trial) withdrawTransports() error {
	stopAll(t.transports, t.stopGrace())
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
	return &transportFailure{msg: fmt.Sprintf("scheme %s (transport %s), host %s: %v", t.point.Scheme, t.scheme.Transport.Name(), host, err), err: err}
}

// transportFailure is a transport that broke the contract on a host, as
// opposed to the lab or the machine failing a trial.
type transportFailure struct {
	msg string
	err error
}

func (e *transportFailure) Error() string { return e.msg }
func (e *transportFailure) Unwrap() error { return e.err }

// exited is the failure of a process that ended before SIGTERM: what it
// did and when, against its ready line and the schedule's start.
func (t *trial) exited(pr *proc) error {
	when := "before its ready line"
	switch {
	case !hasLine(pr.log, transport.ReadyLine):
	case t.startNS == 0 || pr.exitAt.UnixNano() < t.startNS:
		when = "after its ready line, before the start"
	default:
		when = fmt.Sprintf("%.1f s into the schedule, before SIGTERM", float64(pr.exitAt.UnixNano()-t.startNS)/1e9)
	}
	return t.failure(pr.host, fmt.Errorf("%s %s (%s)", pr.status(), when, lastLine(pr.log)))
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
	c := hosts.Command{Argv: argv, Env: env.Environ(), Log: logPath}
	if !t.containers() {
		c.Dir = t.spec.Dir
	}
	p, err := hosts.StartCommand(ctx, ref, c)
	if err != nil {
		return nil, err
	}
	return t.track(newProc(host+"/"+t.scheme.Transport.Name(), host, p, logPath)), nil
}

// track adds pr to the processes stopped, all at once, when the trial
// ends.
func (t *trial) track(pr *proc) *proc {
	if len(t.procs) == 0 {
		t.onCleanup(func() error { stopAll(t.procs, cleanupGrace); return nil })
	}
	t.procs = append(t.procs, pr)
	return pr
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
// placeholders filled in (its program found by Spec.program), or the
// image's own command.
func (t *trial) transportArgv(ctx context.Context, ref hosts.Ref, env *transport.Env) ([]string, error) {
	tr := t.scheme.Transport
	switch {
	case len(tr.Command) > 0:
		argv := make([]string, len(tr.Command))
		for i, a := range tr.Command {
			argv[i] = env.Expand(a)
		}
		if !t.containers() {
			p, err := t.spec.program(argv[0])
			if err != nil {
				return nil, err
			}
			argv[0] = p
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

// program is the absolute path of a transport's program on this machine:
// a relative path is the experiment file's neighbour, and so is a bare
// name when that directory has a file of that name; any other bare name
// is looked up in the PATH that fabric and its transports share.
func (s *Spec) program(name string) (string, error) {
	switch {
	case filepath.IsAbs(name):
		return name, nil
	case strings.Contains(name, "/") && s.Dir != "":
		return filepath.Join(s.Dir, name), nil
	case s.Dir != "":
		if st, err := os.Stat(filepath.Join(s.Dir, name)); err == nil && !st.IsDir() {
			return filepath.Join(s.Dir, name), nil
		}
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("transport program %q: not next to the experiment file (%s) and not in PATH (%s)", name, s.Dir, os.Getenv("PATH"))
	}
	return filepath.Abs(p)
}

// awaitReady waits until every process of procs has printed its ready
// line. The first of them to exit fails the wait, named with what it did;
// at deadline, one still without its line is a *notReadyError.
func (t *trial) awaitReady(ctx context.Context, procs []*proc, deadline time.Time) error {
	ready := make([]bool, len(procs))
	for {
		if pr := firstExited(procs); pr != nil {
			return t.exited(pr)
		}
		waiting := -1
		for i, pr := range procs {
			if !ready[i] && hasLine(pr.log, transport.ReadyLine) {
				ready[i], pr.readyAt = true, time.Now()
			}
			if !ready[i] && waiting < 0 {
				waiting = i
			}
		}
		if waiting < 0 {
			slowest := time.Duration(0)
			for _, pr := range procs {
				slowest = max(slowest, pr.readyAt.Sub(pr.started))
			}
			t.opts.Log.Debug("transports ready", "hosts", len(procs), "slowest", slowest.Round(time.Millisecond), "allowance", t.allowance)
			return nil
		}
		if time.Now().After(deadline) {
			pr := procs[waiting]
			return t.failure(pr.host, &notReadyError{host: pr.host, msg: fmt.Sprintf("no %q line on stdout by the start instant, %v after the launch; a scheme's ready_timeout allows more (%s)",
				transport.ReadyLine, t.allowance, lastLine(pr.log))})
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
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
// it, failing early if a transport exits: the first to have exited is
// named. The drain ends early once every message has a whole flow record
// (recordWatch).
func (t *trial) runSchedule(ctx context.Context) error {
	schedEnd := time.Unix(0, t.startNS).Add(t.spec.Duration)
	end := schedEnd.Add(t.drain())
	exited := make(chan struct{}, len(t.transports))
	for _, pr := range t.transports {
		go func() {
			<-pr.exited
			exited <- struct{}{}
		}()
	}
	var watch *recordWatch
	if t.drain() > 0 {
		watch = newRecordWatch(t.epDir, t.plan.schedule)
	}
	var pollFrom <-chan time.Time // the schedule's end, when there is a watch
	if watch != nil {
		pollFrom = time.After(time.Until(schedEnd))
	}
	poll := time.NewTicker(drainPoll)
	poll.Stop() // started at the schedule's end
	defer poll.Stop()
	var polling <-chan time.Time
	deadline := time.NewTimer(time.Until(end))
	defer deadline.Stop()
	defer func() { t.drained = max(0, time.Since(schedEnd)) }()
	for {
		select {
		case <-exited:
			return t.exited(firstExited(t.transports))
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return nil
		case <-pollFrom:
			poll.Reset(drainPoll)
			polling, pollFrom = poll.C, nil
		case <-polling:
			if watch.done() {
				slog.Debug("drain ended: every message recorded", "trial", t.dir, "drain_left", time.Until(end).Round(time.Millisecond))
				return nil
			}
		}
	}
}

// drain is how long messages sent near the schedule's end get to arrive:
// none for long-lived flows, which run until SIGTERM.
func (t *trial) drain() time.Duration { return t.spec.drainTime() }

// drainTime is how long after the schedule's end messages may finish.
// A poisson packet is out of any buffer of the lab's size in a second
// (the M/D/1 checks' 500 frames take 0.3 s at 25 Mbit/s).
func (s *Spec) drainTime() time.Duration {
	if s.drain > 0 {
		return s.drain
	}
	switch s.Traffic.Pattern {
	case "static", "permutation":
		return 0
	case "poisson":
		return time.Second
	}
	return min(max(s.Duration/3, 2*time.Second), 10*time.Second)
}

// stopTransports sends every transport (and the probe sink) SIGTERM at
// once and waits for them to flush and exit; those that do not within
// the scheme's grace are killed together. The error names the first host that
// failed to stop cleanly, and how many others did.
func (t *trial) stopTransports() error {
	errs := t.stopAndJudge()
	if len(errs) == 0 {
		return nil
	}
	err := errs[0].err
	if len(errs) > 1 {
		others := make([]string, 0, len(errs)-1)
		for _, e := range errs[1:] {
			others = append(others, e.host)
		}
		err = fmt.Errorf("%w; so did %s", err, strings.Join(others, ", "))
	}
	return t.failure(errs[0].host, err)
}

// hostError is what one host's process did wrong, and when.
type hostError struct {
	host string
	at   time.Time
	err  error
}

// stopAndJudge stops the transports and the probe sink and says, for each
// that did not exit 0 within the grace after SIGTERM, what it did: the ones
// that exited with an error first, in the order they exited, then the
// ones killed. One that had exited before is not judged here.
func (t *trial) stopAndJudge() []hostError {
	procs := t.transports
	if t.probeSink != nil {
		procs = append(procs[:len(procs):len(procs)], t.probeSink)
	}
	term := time.Now()
	killed := stopAll(procs, t.stopGrace())
	var out []hostError
	for _, pr := range procs {
		if pr.exitErr != nil && !slices.Contains(killed, pr) && !pr.exitAt.Before(term) {
			out = append(out, hostError{pr.host, pr.exitAt, fmt.Errorf("%s after SIGTERM (%s)", pr.status(), lastLine(pr.log))})
		}
	}
	slices.SortStableFunc(out, func(a, b hostError) int { return a.at.Compare(b.at) })
	for _, pr := range killed {
		out = append(out, hostError{pr.host, pr.exitAt, fmt.Errorf("did not exit within %v of SIGTERM; killed (%s)", t.stopGrace(), lastLine(pr.log))})
	}
	return out
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
	p, err := t.startFabric(ctx, to, "probe-sink", []string{"probe", "sink", "--host", pr.To, "--addr", to.Addr().String(), "--records", records})
	if err != nil {
		return err
	}
	t.probeSink = p
	return t.awaitReady(ctx, []*proc{p}, time.Now().Add(readyAllowanceNetNS))
}

// startProbe starts the probe sender of measure.probe, if any.
func (t *trial) startProbe(ctx context.Context) error {
	pr := t.spec.Measure.Probe
	if pr == nil {
		return nil
	}
	p, err := t.startFabric(ctx, t.lab.Host(pr.From), "probe", []string{"probe", "send", "--host", pr.From,
		"--to", t.lab.Host(pr.To).Addr().String(), "--dscp", "CS0", "--interval", pr.every().String(), "--duration", t.spec.Duration.String()})
	t.probe = p
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
	return t.track(newProc(h.Name()+"/"+role, h.Name(), p, logPath)), nil
}
