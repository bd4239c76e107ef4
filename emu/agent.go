package emu

// Some of what a lab runs lives in a process, not in the kernel: each HULL
// pacer's rate controller is a loop (tc/pacer), and so is a delay line.
// Up starts them in the calling process, and the *Lab it returns owns
// them: Lab.Down stops them. A Go program keeps its lab's pacers for as
// long as it runs.
//
// `fabric up` exits after the build, so a lab that needs such a process
// is built by an agent instead: UpDetached re-executes the program as a
// child in its own session, relays the child's output until the lab is up,
// and returns; the child (IsAgent) builds the lab, then Holds it until
// `fabric down` (Down) sends it SIGTERM. The program must give the child
// its chance: call IsAgent early in main and, when it is true, build and
// hold the lab as asked (cmd/fabric's `up` does).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

const (
	// agentEnv tells a re-executed program that it is the agent child.
	agentEnv = "FABRIC_LAB_AGENT"
	// agentReadyFD is the pipe on which the agent says "ready".
	agentReadyFD = 3
	agentReady   = "ready"
	// AgentLog is the agent's log, in the lab's state directory.
	AgentLog = "agent.log"
)

// IsAgent reports whether this process is an agent child of UpDetached.
func IsAgent() bool { return os.Getenv(agentEnv) != "" }

// NeedsAgent reports whether a lab built from s runs something in a
// process (pacers, delay lines), so that a command that exits after Up must
// leave an agent behind to hold it.
func (s *Spec) NeedsAgent() (bool, error) {
	g, err := s.Resolve()
	if err != nil {
		return false, err
	}
	return len(s.PacedHosts(g)) > 0 || g.HasDelayLines(), nil
}

// UpDetached runs this program again as the agent child, with args (the
// command line that makes the child build the lab and Hold it), and
// returns once the lab is up (nil) or the child has failed. The child's
// output reaches out and errOut until then. A child that exits with an
// error has printed it and rolled its build back; the *ExitError says its
// code. A child killed part-way is rolled back here.
func UpDetached(ctx context.Context, lab string, args []string, out, errOut io.Writer) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding this program to start the lab agent: %w", err)
	}
	c := exec.Command(exe, args...)
	c.Env = append(os.Environ(), agentEnv+"=1")
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // not ended by the terminal's Ctrl-C
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer readyR.Close()
	c.ExtraFiles = []*os.File{readyW} // fd 3 = agentReadyFD
	relay, childEnds, err := relayOutput(out, errOut)
	if err != nil {
		return err
	}
	c.Stdout, c.Stderr = childEnds[0], childEnds[1]
	err = c.Start()
	for _, f := range append(childEnds, readyW) {
		f.Close()
	}
	if err != nil {
		relay.Wait()
		return fmt.Errorf("starting the lab agent: %w", err)
	}
	// Ctrl-C while the lab is being built rolls the child's build back.
	stop := context.AfterFunc(ctx, func() { c.Process.Signal(os.Interrupt) })
	status, _ := io.ReadAll(readyR)
	stop()
	relay.Wait() // the agent points its output at its log once ready
	if strings.TrimSpace(string(status)) == agentReady {
		return c.Process.Release()
	}
	werr := c.Wait()
	var ee *exec.ExitError
	if errors.As(werr, &ee) && ee.ExitCode() > 0 {
		return ee // the child printed why and rolled back
	}
	// Killed part-way: nobody rolled the lab back.
	return errors.Join(fmt.Errorf("lab agent: %v", werr), Down(context.WithoutCancel(ctx), lab))
}

// relayOutput copies what the child writes to two pipes into out and
// errOut (under one lock: they may be one writer) until the child closes
// them; the child's ends are returned for its Stdout and Stderr.
func relayOutput(out, errOut io.Writer) (*sync.WaitGroup, []*os.File, error) {
	relay := &sync.WaitGroup{}
	var mu sync.Mutex
	var childEnds []*os.File
	for _, dst := range []io.Writer{out, errOut} {
		r, w, err := os.Pipe()
		if err != nil {
			for _, f := range childEnds {
				f.Close()
			}
			return nil, nil, err
		}
		childEnds = append(childEnds, w)
		relay.Go(func() {
			defer r.Close()
			buf := make([]byte, 4096)
			for {
				n, err := r.Read(buf)
				mu.Lock()
				dst.Write(buf[:n])
				mu.Unlock()
				if err != nil {
					return
				}
			}
		})
	}
	return relay, childEnds, nil
}

// Hold is the agent's life once its lab is up: it tells the parent, moves
// its own output to the lab's AgentLog, and runs the lab's pacers and delay
// lines until ctx ends (Down sends SIGTERM), then stops them. The lab stays
// up, and its delayed links carry nothing once the agent is gone.
func (l *Lab) Hold(ctx context.Context) error {
	log, err := os.OpenFile(filepath.Join(LabDir(l.Name), AgentLog), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil { // nobody would hold the lab: the up fails as a whole
		return errors.Join(fmt.Errorf("lab agent: %w", err), l.Down(context.WithoutCancel(ctx)))
	}
	defer log.Close()
	if IsAgent() {
		ready := os.NewFile(agentReadyFD, "ready")
		fmt.Fprintln(ready, agentReady)
		ready.Close()
	}
	// From here on nobody reads the parent's pipes.
	for _, fd := range []int{1, 2} {
		if err := unix.Dup3(int(log.Fd()), fd, 0); err != nil {
			return err
		}
	}
	slog.Info("lab agent holding", "lab", l.Name, "pid", os.Getpid(), "pacers", strings.Join(slices.Sorted(maps.Keys(l.Pacers())), ","))
	<-ctx.Done()
	err = errors.Join(l.StopPacers(), l.StopDelayLoop())
	slog.Info("lab agent stopped", "lab", l.Name, "err", err)
	return err
}
