package hosts

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/fabric-emu/fabric/internal/netnsutil"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"
	"golang.org/x/sys/unix"
)

// Process is a program running on a host: an endpoint, typically.
type Process interface {
	// PID is the process id in the machine's (root) PID namespace, for
	// both runtimes.
	PID() int
	// Signal sends sig to the process. After the process has exited it
	// returns os.ErrProcessDone.
	Signal(sig os.Signal) error
	// Wait blocks until the process exits and returns nil for exit code 0,
	// an *ExitError otherwise. It may be called more than once.
	Wait() error
}

// ExitError is a program on a host that ended unsuccessfully.
type ExitError struct {
	Host    string
	Program string
	Code    int    // exit code; -1 when killed by a signal
	Status  string // how it ended, e.g. "exit status 2" or "signal: killed"
}

func (e *ExitError) Error() string {
	return fmt.Sprintf("host %s: %s: %s", e.Host, e.Program, e.Status)
}

// EnvFabricBinary names the fabric executable StartFabric runs on netns
// hosts. Tests set it: their own executable is a test binary, not fabric.
const EnvFabricBinary = "FABRIC_BINARY"

// ImageFabricBinary is where the endpoint image keeps the fabric binary.
const ImageFabricBinary = "/fabric"

// FabricBinary is the fabric executable for netns hosts: $FABRIC_BINARY,
// or else the running executable.
func FabricBinary() (string, error) {
	if p := os.Getenv(EnvFabricBinary); p != "" {
		return p, nil
	}
	return os.Executable()
}

// FabricIn is the path of the fabric binary on the host: this machine's
// on a netns host, /fabric in fabric's endpoint image, and the copy
// mounted into a held container (Ref.Hold) otherwise.
func FabricIn(ref Ref) (string, error) {
	switch {
	case !isDocker(ref):
		return FabricBinary()
	case ref.Hold:
		return heldFabric, nil
	}
	return ImageFabricBinary, nil
}

// StartFabric runs `fabric args...` on the host (FabricIn).
func StartFabric(ctx context.Context, ref Ref, args []string, logPath string) (Process, error) {
	bin, err := FabricIn(ref)
	if err != nil {
		return nil, hostError(ref, fmt.Errorf("find the fabric binary: %w", err))
	}
	return Start(ctx, ref, append([]string{bin}, args...), logPath)
}

// Start runs argv on the host and sends its stdout and stderr to logPath
// (appending; "" discards them). It is StartCommand without extra
// environment.
func Start(ctx context.Context, ref Ref, argv []string, logPath string) (Process, error) {
	return StartCommand(ctx, ref, Command{Argv: argv, Log: logPath})
}

// Command is a process to start on a host.
type Command struct {
	Argv []string
	Env  []string // NAME=value, added to the environment it would have
	Log  string   // stdout and stderr are appended here; "" discards them
	// Dir is the working directory on a netns host ("" keeps fabric's);
	// a docker host's command runs in its image's.
	Dir string
}

// StartCommand starts c on the host. On a netns host it is a child process
// started inside the host's namespace; on a docker host it is a `docker
// exec` in the container, so Argv[0] is a path inside the image. ctx bounds
// the start only: stop the process with Signal.
//
// On docker hosts, paths in Argv are paths in the container: only the
// lab's run directory (Ref.RunDir) is mounted there, at the same path.
func StartCommand(ctx context.Context, ref Ref, c Command) (Process, error) {
	if len(c.Argv) == 0 {
		return nil, hostError(ref, errors.New("no command to start"))
	}
	if isDocker(ref) {
		return defaultDocker.Start(ctx, ref, c)
	}
	if !IsNetNS(ref.Runtime) {
		return nil, hostError(ref, fmt.Errorf("cannot start processes on runtime %q", ref.Runtime))
	}
	return startInNetNS(ref, c)
}

func isDocker(ref Ref) bool { return ref.Runtime == RuntimeDocker }

// openLog opens a process log for appending, making its directory.
func openLog(path string) (*os.File, error) {
	if path == "" {
		path = os.DevNull
	} else if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	return os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
}

// StartIn starts cmd inside the network namespace mounted at netnsPath. A
// forked child inherits the forking thread's namespace, so the fork happens
// on a thread that netnsutil has moved into it.
func StartIn(netnsPath string, cmd *exec.Cmd) error {
	return netnsutil.Do(netnsPath, cmd.Start)
}

// netnsProcess is a child process of fabric in a host namespace.
type netnsProcess struct {
	host string
	cmd  *exec.Cmd
	once sync.Once
	err  error
	done chan struct{}
}

func startInNetNS(ref Ref, c Command) (Process, error) {
	argv := c.Argv
	log, err := openLog(c.Log)
	if err != nil {
		return nil, hostError(ref, fmt.Errorf("process log: %w", err))
	}
	defer log.Close() // the child has its own copy
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Dir = c.Dir
	if len(c.Env) > 0 {
		cmd.Env = append(os.Environ(), c.Env...)
	}
	// Its own process group: a Ctrl-C at the terminal reaches fabric, which
	// then stops endpoints in order (SIGTERM, so they flush their records),
	// instead of every endpoint at once.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := StartIn(ref.NetNS, cmd); err != nil {
		return nil, hostError(ref, fmt.Errorf("start %s: %w", argv[0], err))
	}
	return &netnsProcess{host: ref.Node, cmd: cmd, done: make(chan struct{})}, nil
}

func (p *netnsProcess) PID() int { return p.cmd.Process.Pid }

func (p *netnsProcess) Signal(sig os.Signal) error {
	select {
	case <-p.done:
		return os.ErrProcessDone
	default:
		return p.cmd.Process.Signal(sig)
	}
}

func (p *netnsProcess) Wait() error {
	p.once.Do(func() {
		err := p.cmd.Wait()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = &ExitError{Host: p.host, Program: p.cmd.Path, Code: ee.ExitCode(), Status: ee.ProcessState.String()}
		}
		p.err = err
		close(p.done)
	})
	<-p.done
	return p.err
}

// Start runs argv in the host's container with `docker exec`, copying its
// output to logPath on this machine.
func (d *Docker) Start(ctx context.Context, ref Ref, c Command) (Process, error) {
	cli, err := d.client(ctx)
	if err != nil {
		return nil, hostError(ref, err)
	}
	argv, logPath := c.Argv, c.Log
	name := containerOf(ref)
	created, err := cli.ExecCreate(ctx, name, client.ExecCreateOptions{Cmd: argv, Env: c.Env, AttachStdout: true, AttachStderr: true})
	switch {
	case cerrdefs.IsNotFound(err):
		return nil, hostError(ref, fmt.Errorf("container %s not found (is the lab up?)", name))
	case err != nil:
		return nil, hostError(ref, fmt.Errorf("exec %s in container %s: %w", argv[0], name, err))
	}
	log, err := openLog(logPath)
	if err != nil {
		return nil, hostError(ref, fmt.Errorf("process log: %w", err))
	}
	// The stream outlives Start, so it must not end with ctx.
	attached, err := cli.ExecAttach(context.WithoutCancel(ctx), created.ID, client.ExecAttachOptions{})
	if err != nil {
		log.Close()
		return nil, hostError(ref, fmt.Errorf("exec %s in container %s: %w", argv[0], name, err))
	}
	p := &dockerProcess{cli: cli, host: ref.Node, program: argv[0], execID: created.ID, streamDone: make(chan struct{})}
	go func() {
		_, p.streamErr = stdcopy.StdCopy(log, log, attached.Reader)
		attached.Close()
		log.Close()
		close(p.streamDone)
	}()

	// The exec's pid appears once the runtime has started it.
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := cli.ExecInspect(ctx, created.ID, client.ExecInspectOptions{})
		if err != nil {
			return nil, hostError(ref, fmt.Errorf("inspect exec of %s: %w", argv[0], err))
		}
		if st.PID != 0 {
			p.pid = st.PID
			return p, nil
		}
		if !st.Running && st.ExitCode != 0 {
			<-p.streamDone
			return nil, hostError(ref, fmt.Errorf("cannot run %s in container %s: exit code %d (see %s)", argv[0], name, st.ExitCode, logPath))
		}
		if time.Now().After(deadline) {
			return nil, hostError(ref, fmt.Errorf("exec of %s in container %s did not start within 10s", argv[0], name))
		}
		select {
		case <-ctx.Done():
			return nil, hostError(ref, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// dockerProcess is a `docker exec` in a host's container. The daemon runs
// in the machine's PID namespace, so the exec's pid is signalled directly:
// the Engine API has no call to signal an exec.
type dockerProcess struct {
	cli        *client.Client
	host       string
	program    string
	execID     string
	pid        int
	streamDone chan struct{}
	streamErr  error

	once sync.Once
	err  error
}

func (p *dockerProcess) PID() int { return p.pid }

func (p *dockerProcess) Signal(sig os.Signal) error {
	select {
	case <-p.streamDone:
		return os.ErrProcessDone
	default:
	}
	s, ok := sig.(syscall.Signal)
	if !ok {
		return fmt.Errorf("host %s: unsupported signal %v", p.host, sig)
	}
	return unix.Kill(p.pid, s)
}

func (p *dockerProcess) Wait() error {
	p.once.Do(func() { p.err = p.wait() })
	return p.err
}

func (p *dockerProcess) wait() error {
	<-p.streamDone
	// The output stream ends when the process does; the daemon records the
	// exit code a moment later.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		st, err := p.cli.ExecInspect(ctx, p.execID, client.ExecInspectOptions{})
		if err != nil {
			return fmt.Errorf("host %s: exit status of %s: %w", p.host, p.program, err)
		}
		if !st.Running {
			if st.ExitCode != 0 {
				return &ExitError{Host: p.host, Program: p.program, Code: st.ExitCode, Status: fmt.Sprintf("exit status %d", st.ExitCode)}
			}
			if p.streamErr != nil {
				return fmt.Errorf("host %s: output of %s: %w", p.host, p.program, p.streamErr)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("host %s: %s still running after its output ended", p.host, p.program)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// Exec runs argv in the host's network namespace with the given standard
// streams and waits for it: `fabric exec LAB NODE -- cmd...`. It enters the
// namespace mounted at ref.NetNS for both runtimes, so the command comes
// from this machine's filesystem (ping, ip, ss, tcpdump) even for docker
// hosts, whose FROM scratch image has none of them. A non-zero exit is an
// *ExitError carrying the code.
func Exec(ctx context.Context, ref Ref, argv []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(argv) == 0 {
		return hostError(ref, errors.New("no command to run"))
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	if err := StartIn(ref.NetNS, cmd); err != nil {
		return hostError(ref, fmt.Errorf("start %s: %w", argv[0], err))
	}
	err := cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return &ExitError{Host: ref.Node, Program: argv[0], Code: ee.ExitCode(), Status: ee.ProcessState.String()}
	}
	return err
}
