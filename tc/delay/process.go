package delay

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fabric-emu/fabric/internal/cpustat"
)

// The lines run in a process of their own, this program started again
// (the init below), and Loop is its handle. In the process that runs a
// lab's captures, monitor and runner, Go's scheduler made the loop late:
// every 10 ms the runtime preempts a goroutine that has not passed through
// it, which the loop, holding its P in raw system calls, never does, and
// its locked thread then waits until another thread hands a P back, up to
// milliseconds while the other goroutines keep every P busy. In a process
// whose only busy goroutine is the loop, a P is always idle and the
// hand-over takes tens of µs.

// childEnv tells this program, started again, to run delay lines.
const childEnv = "FABRIC_DELAY_LINES"

// childFD is the child's end of the socket to its parent.
const childFD = 3

func init() {
	if os.Getenv(childEnv) == "1" {
		os.Exit(serveChild(os.NewFile(childFD, "delay-lines")))
	}
}

// running counts the lines this process has started and not stopped
// (OffLoopCPU).
var running atomic.Int32

// Running says whether this process has delay lines running.
func Running() bool { return running.Load() > 0 }

// A Loop is a lab's delay lines, run by a child process (see above) that
// serves the handle's questions over a socket. If this process dies, the
// child sees the socket close and stops the lines; delayed links then
// carry nothing.
type Loop struct {
	cmd *exec.Cmd
	pid int

	mu   sync.Mutex // one question at a time; guards the rest
	conn *os.File
	enc  *json.Encoder
	dec  *json.Decoder
	gone error // why the child cannot answer, once it cannot
	// untrack ends the child's CPU account (cpustat.TrackProcess).
	untrack func(total time.Duration)
}

// childConfig is what the child needs to start the lines.
type childConfig struct {
	NetNS string
	Lines []Line
	Seed  uint64
}

// The questions the handle asks.
const (
	opStats  = "stats"
	opUse    = "use"
	opMargin = "margin"
	opErr    = "err"
	opStop   = "stop"
)

type request struct{ Op string }

type reply struct {
	Err   string     `json:",omitempty"`
	Stats *wireStats `json:",omitempty"`
	Use   *Use       `json:",omitempty"`
	NS    int64      `json:",omitempty"`
}

// wireStats is Stats on the socket, the histogram's empty buckets left out.
type wireStats struct {
	Lines    []LineStats
	Realtime bool
	Demoted  time.Duration
	Buckets  [][2]uint64 // bucket, count
	Over, N  uint64
	Max      time.Duration
}

func toWire(s Stats) *wireStats {
	w := &wireStats{Lines: s.Lines, Realtime: s.Realtime, Demoted: s.Demoted, Over: s.lateness.over, N: s.lateness.n, Max: s.lateness.max}
	for i, c := range s.lateness.counts {
		if c > 0 {
			w.Buckets = append(w.Buckets, [2]uint64{uint64(i), c})
		}
	}
	return w
}

func (w *wireStats) stats() Stats {
	s := Stats{Lines: w.Lines, Realtime: w.Realtime, Demoted: w.Demoted}
	s.lateness.over, s.lateness.n, s.lateness.max = w.Over, w.N, w.Max
	for _, b := range w.Buckets {
		if b[0] < uint64(len(s.lateness.counts)) {
			s.lateness.counts[b[0]] = b[1]
		}
	}
	return s
}

// Start starts a process that binds a queue per line in the delay
// namespace at netnsPath, sends each line's interface to its queue, and
// runs the loop; it returns once the lines run. Stop ends them. The
// process's CPU time counts as the delay lines' (cpustat.DelayLines).
func Start(netnsPath string, lines []Line, seed uint64) (*Loop, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("delay lines: finding this program: %w", err)
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("delay lines: %w", err)
	}
	conn, childEnd := os.NewFile(uintptr(fds[0]), "delay-lines"), os.NewFile(uintptr(fds[1]), "delay-lines")
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), childEnv+"=1")
	cmd.ExtraFiles = []*os.File{childEnd} // fd 3 = childFD
	// Through a pipe that this process copies: a child holding this
	// process's stderr itself would keep a pipe that someone waits to
	// see closed open (fabric up waits for its agent's), and it would
	// keep writing where this process's stderr was when it started.
	cmd.Stderr = stderr{}
	// A process group of its own: a terminal's Ctrl-C reaches the parent,
	// which stops the lines when it has rolled its lab back, not before.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	childEnd.Close()
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("delay lines: starting their process: %w", err)
	}
	w := &Loop{cmd: cmd, pid: cmd.Process.Pid, conn: conn, enc: json.NewEncoder(conn), dec: json.NewDecoder(conn)}
	var r reply
	err = w.enc.Encode(childConfig{NetNS: netnsPath, Lines: lines, Seed: seed})
	if err == nil {
		err = w.dec.Decode(&r)
	}
	if err == nil && r.Err != "" {
		err = errors.New(r.Err)
	}
	if err != nil {
		conn.Close()
		cmd.Wait()
		return nil, err
	}
	w.untrack = cpustat.TrackProcess(cpustat.DelayLines, w.pid)
	running.Add(1)
	return w, nil
}

// stderr writes to this process's stderr as it is now.
type stderr struct{}

func (stderr) Write(b []byte) (int, error) { return os.Stderr.Write(b) }

// ask asks the child one question.
func (w *Loop) ask(op string) (reply, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.gone != nil {
		return reply{}, w.gone
	}
	var r reply
	err := w.enc.Encode(request{Op: op})
	if err == nil {
		err = w.dec.Decode(&r)
	}
	if err != nil {
		w.gone = fmt.Errorf("delay lines: their process %d: %w", w.pid, err)
		return reply{}, w.gone
	}
	return r, nil
}

// PID is the process that runs the lines.
func (w *Loop) PID() int { return w.pid }

// Stats reads the lines' counters and the kernel's drop counts.
func (w *Loop) Stats() (Stats, error) {
	r, err := w.ask(opStats)
	if err != nil {
		return Stats{}, err
	}
	var s Stats
	if r.Stats != nil {
		s = r.Stats.stats()
	}
	if r.Err != "" {
		err = errors.New(r.Err)
	}
	return s, err
}

// Use is what the loop's thread has used: its CPU (user and system, what
// the delay lines cost this machine, the child's other threads left out),
// the part of it spent in verdicts' system calls (on its thread, which
// never yields there, that is CPU time, and most of it is the kernel
// forwarding the released packets; the rest is the loop's own) and its
// turns, each a wake-up or a spin to a release.
type Use struct {
	CPU, Verdict time.Duration
	Turns        uint64
}

// Use reads the loop's use since it started, in one question to the child.
func (w *Loop) Use() (Use, error) {
	r, err := w.ask(opUse)
	if err == nil && r.Err != "" {
		err = errors.New(r.Err)
	}
	if r.Use == nil {
		return Use{}, err
	}
	return *r.Use, err
}

// Since is what the loop used between an earlier reading and u.
func (u Use) Since(before Use) Use {
	return Use{CPU: u.CPU - before.CPU, Verdict: u.Verdict - before.Verdict, Turns: u.Turns - before.Turns}
}

// Margin is how early the loop wakes before a release (measured at start,
// then tracked, see nextMargin).
func (w *Loop) Margin() time.Duration {
	r, _ := w.ask(opMargin)
	return time.Duration(r.NS)
}

// Err is why the lines stopped early, or nil: the loop's error, or the
// child's end.
func (w *Loop) Err() error {
	r, err := w.ask(opErr)
	if err == nil && r.Err != "" {
		err = errors.New(r.Err)
	}
	return err
}

// Stop ends the lines and their process; packets still held are dropped
// with the queues.
func (w *Loop) Stop() error {
	r, err := w.ask(opStop)
	if err == nil && r.Err != "" {
		err = errors.New(r.Err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.untrack == nil {
		return err // stopped before
	}
	w.conn.Close() // a child that did not get the question sees it close
	werr := w.cmd.Wait()
	var total time.Duration
	if ps := w.cmd.ProcessState; ps != nil {
		total = ps.UserTime() + ps.SystemTime()
	}
	w.untrack(total)
	w.untrack = nil
	w.gone = errors.New("delay lines: stopped")
	running.Add(-1)
	if werr != nil && err == nil {
		err = fmt.Errorf("delay lines: their process %d: %w", w.pid, werr)
	}
	return err
}

// serveChild is the child's life: it starts the lines as its parent asks,
// answers its questions, and stops the lines when asked or when the parent
// is gone. It returns the process's exit code.
func serveChild(conn *os.File) int {
	enc, dec := json.NewEncoder(conn), json.NewDecoder(conn)
	var cfg childConfig
	if err := dec.Decode(&cfg); err != nil {
		fmt.Fprintln(os.Stderr, "delay lines: reading their configuration:", err)
		return 2
	}
	w, err := startEventLoop(cfg.NetNS, cfg.Lines, cfg.Seed)
	if err != nil {
		enc.Encode(reply{Err: err.Error()})
		return 1
	}
	if enc.Encode(reply{}) != nil {
		w.Stop()
		return 1
	}
	errText := func(err error) string {
		if err == nil {
			return ""
		}
		return err.Error()
	}
	for {
		var q request
		if err := dec.Decode(&q); err != nil {
			w.Stop() // the parent is gone
			return 0
		}
		var r reply
		switch q.Op {
		case opStats:
			s, err := w.Stats()
			r = reply{Stats: toWire(s), Err: errText(err)}
		case opUse:
			d, err := w.LoopCPU()
			r = reply{Use: &Use{CPU: d, Verdict: w.VerdictTime(), Turns: w.Turns()}, Err: errText(err)}
		case opMargin:
			r.NS = int64(w.Margin())
		case opErr:
			r.Err = errText(w.Err())
		case opStop:
			enc.Encode(reply{Err: errText(w.Stop())})
			return 0
		default:
			r.Err = fmt.Sprintf("delay lines: unknown question %q", q.Op)
		}
		if enc.Encode(r) != nil {
			w.Stop()
			return 0
		}
	}
}
