package experiments

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/fabric-emu/fabric/hosts"
)

// proc is an endpoint process of the trial.
type proc struct {
	name string
	host string
	p    hosts.Process
	log  string
}

// awaitLog waits until the process's log holds line, or it exits.
func awaitLog(ctx context.Context, pr *proc, line string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	exited := make(chan error, 1)
	go func() { exited <- pr.p.Wait() }()
	for {
		if b, _ := os.ReadFile(pr.log); bytes.Contains(b, []byte(line)) {
			return nil
		}
		select {
		case err := <-exited:
			return fmt.Errorf("%s exited before it was ready: %v (%s)", pr.name, err, lastLine(pr.log))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %v (%s)", pr.name, timeout, lastLine(pr.log))
		}
	}
}

// waitProc waits for a client to finish by itself; when ctx ends first it
// stops the client and returns ctx's error.
func waitProc(ctx context.Context, pr *proc) error {
	done := make(chan error, 1)
	go func() { done <- pr.p.Wait() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		stopProc(pr, 5*time.Second)
		return ctx.Err()
	}
}

// waitTimeout waits for an exit already asked for, killing after d.
func waitTimeout(pr *proc, d time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- pr.p.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		pr.p.Signal(syscall.SIGKILL)
		<-done
		return fmt.Errorf("did not stop within %v; killed", d)
	}
}

// stopProc asks a process to stop (SIGTERM flushes its records) and kills
// it if it does not. A process that already exited is left alone.
func stopProc(pr *proc, d time.Duration) {
	if err := pr.p.Signal(syscall.SIGTERM); errors.Is(err, os.ErrProcessDone) {
		pr.p.Wait()
		return
	}
	waitTimeout(pr, d)
}

// lastLine is the last non-empty line of a log, for error messages.
func lastLine(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "no log"
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) == 0 || lines[len(lines)-1] == "" {
		return "empty log"
	}
	return lines[len(lines)-1]
}
