package experiments

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/fabric-emu/fabric/hosts"
)

// proc is an endpoint process of the trial. Its exit is watched from its
// start, so that of several processes that ended the first is known.
type proc struct {
	name string
	host string
	p    hosts.Process
	log  string

	started time.Time
	readyAt time.Time     // when its ready line was seen, if it was
	exited  chan struct{} // closed when the process has exited
	exitAt  time.Time
	exitErr error
}

// newProc watches p, started on host with its output in log.
func newProc(name, host string, p hosts.Process, log string) *proc {
	pr := &proc{name: name, host: host, p: p, log: log, started: time.Now(), exited: make(chan struct{})}
	go func() {
		err := p.Wait()
		pr.exitAt, pr.exitErr = time.Now(), err
		close(pr.exited)
	}()
	return pr
}

// done reports whether the process has exited.
func (pr *proc) done() bool {
	select {
	case <-pr.exited:
		return true
	default:
		return false
	}
}

// status says how an exited process ended: "exited with status 3".
func (pr *proc) status() string {
	var ee *hosts.ExitError
	switch {
	case pr.exitErr == nil:
		return "exited with status 0"
	case errors.As(pr.exitErr, &ee) && ee.Code >= 0:
		return fmt.Sprintf("exited with status %d", ee.Code)
	case errors.As(pr.exitErr, &ee):
		return "ended by " + ee.Status
	}
	return "exited: " + pr.exitErr.Error()
}

// firstExited is the process of procs that exited first, or nil.
func firstExited(procs []*proc) *proc {
	var first *proc
	for _, pr := range procs {
		if pr.done() && (first == nil || pr.exitAt.Before(first.exitAt)) {
			first = pr
		}
	}
	return first
}

// stopAll sends every process SIGTERM at once, waits for them together,
// and kills, together, those still running after grace. It returns the
// processes it killed. One already exited is left alone.
func stopAll(procs []*proc, grace time.Duration) (killed []*proc) {
	for _, pr := range procs {
		pr.p.Signal(syscall.SIGTERM)
	}
	timer := time.NewTimer(grace)
	defer timer.Stop()
	for _, pr := range procs {
		select {
		case <-pr.exited:
			continue
		case <-timer.C:
		}
		break
	}
	for _, pr := range procs {
		if !pr.done() {
			killed = append(killed, pr)
			pr.p.Signal(syscall.SIGKILL)
		}
	}
	for _, pr := range killed {
		<-pr.exited
	}
	return killed
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
