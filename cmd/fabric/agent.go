package main

// A lab whose hosts have HULL's pacer needs a process for as long as it is
// up: each pacer's rate controller is a loop (tc/pacer). `fabric up` then
// runs the whole build in a child process in its own session, relays the
// child's output until the lab is up, and exits; the child stays behind as
// the lab's pacer agent until `fabric down` sends it SIGTERM (emu.Down).

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

	"fabric/emu"
)

const (
	// agentEnv tells a `fabric up` that it is the agent child.
	agentEnv = "FABRIC_PACER_AGENT"
	// agentReadyFD is the pipe on which the agent says "ready".
	agentReadyFD = 3
	agentReady   = "ready"
	agentLog     = "pacers.log" // in the lab's state directory
)

func isAgent() bool { return os.Getenv(agentEnv) != "" }

// upWithAgent runs `fabric up file` (lab named lab) as the agent child and
// returns once the lab is up (nil) or the child has failed (its exit code;
// it printed its own error).
func upWithAgent(ctx context.Context, out, errOut io.Writer, lab, file string, verbose bool) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding this program to start the pacer agent: %w", err)
	}
	args := []string{"up", file}
	if verbose {
		args = append(args, "-v")
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
	// The child writes to pipes that are relayed here until it is ready.
	// One lock over both: out and errOut may be one writer.
	var relay sync.WaitGroup
	var relayMu sync.Mutex
	var childEnds []*os.File
	for _, dst := range []io.Writer{out, errOut} {
		r, w, err := os.Pipe()
		if err != nil {
			return err
		}
		childEnds = append(childEnds, w)
		relay.Go(func() {
			defer r.Close()
			buf := make([]byte, 4096)
			for {
				n, err := r.Read(buf)
				relayMu.Lock()
				dst.Write(buf[:n])
				relayMu.Unlock()
				if err != nil {
					return
				}
			}
		})
	}
	c.Stdout, c.Stderr = childEnds[0], childEnds[1]
	err = c.Start()
	for _, f := range append(childEnds, readyW) {
		f.Close()
	}
	if err != nil {
		relay.Wait()
		return fmt.Errorf("starting the pacer agent: %w", err)
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
	if c.ProcessState != nil && c.ProcessState.ExitCode() > 0 {
		return exitError{code: c.ProcessState.ExitCode()} // the child printed why and rolled back
	}
	// Killed part-way: nobody rolled the lab back.
	return errors.Join(fmt.Errorf("pacer agent: %v", werr), emu.Down(context.WithoutCancel(ctx), lab))
}

// holdPacers is the agent's life after its lab is up (emu.Up recorded it
// as the holder, see BecomePacerAgent): tell the parent, move its output
// to the lab's log, and stop the pacers when signalled (the lab stays up).
func holdPacers(ctx context.Context, lab *emu.Lab) error {
	log, err := os.OpenFile(filepath.Join(emu.LabDir(lab.Name), agentLog), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil { // nobody would hold the pacers: the up fails as a whole
		return errors.Join(fmt.Errorf("pacer agent: %w", err), lab.Down(context.WithoutCancel(ctx)))
	}
	defer log.Close()
	ready := os.NewFile(agentReadyFD, "ready")
	fmt.Fprintln(ready, agentReady)
	ready.Close()
	// From here on nobody reads the parent's pipes.
	for _, fd := range []int{1, 2} {
		if err := unix.Dup3(int(log.Fd()), fd, 0); err != nil {
			return err
		}
	}
	slog.Info("pacer agent holding", "lab", lab.Name, "pid", os.Getpid(), "hosts", strings.Join(slices.Sorted(maps.Keys(lab.Pacers())), ","))
	<-ctx.Done()
	err = lab.StopPacers()
	slog.Info("pacer agent stopped", "lab", lab.Name, "err", err)
	return err
}
