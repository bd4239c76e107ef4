package endpoint

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"fabric/emu"
	"fabric/internal/records"
	"fabric/internal/testenv"
)

// The privileged tests build real labs with emu and run the engine as
// separate processes inside the host namespaces, exactly as the runtimes
// do: the test binary re-executes itself as `fabric endpoint` (TestMain
// below), parsing its arguments with ParseArgs.

const childEnv = "FABRIC_ENDPOINT_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		os.Exit(childMain(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// childMain is what `fabric endpoint` does, minus cobra.
func childMain(args []string) int {
	cfg, err := ParseArgs(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, "endpoint:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := Run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "endpoint:", err)
		return 1
	}
	return 0
}

// labName is unique per test process, so concurrent runs of this package
// (and other engineers' labs) never collide.
func labName(tag string) string { return fmt.Sprintf("tep%d-%s", os.Getpid()%100000, tag) }

// upLab builds a lab from YAML and removes it when the test ends.
func upLab(t *testing.T, yaml string) *emu.Lab {
	t.Helper()
	spec, err := emu.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	lab, err := emu.Up(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := lab.Down(context.Background()); err != nil {
			t.Errorf("down: %v", err)
		}
	})
	// A lab that cannot ping is emu's failure, not the engine's; say so.
	res, err := lab.PingAll(ctx, 2*time.Second)
	if err != nil {
		t.Fatalf("pingall: %v", err)
	}
	if lost := res.Lost(); len(lost) > 0 {
		t.Fatalf("lab %s is not connected before any endpoint starts: lost %v", lab.Name, lost)
	}
	return lab
}

// proc is an endpoint process running inside a host namespace.
type proc struct {
	t    *testing.T
	name string
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has been reaped
	err  error         // its exit status, valid after done
	log  string
}

// start runs `endpoint args...` inside node's namespace. The child is
// forked from a thread that is inside the namespace, so it lives there.
func start(t *testing.T, lab *emu.Lab, node string, args ...string) *proc {
	t.Helper()
	logFile := filepath.Join(t.TempDir(), node+"-"+args[0]+".log")
	out, err := os.Create(logFile)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), childEnv+"=1")
	cmd.Stdout, cmd.Stderr = out, out
	if err := lab.Do(node, cmd.Start); err != nil {
		t.Fatalf("start %s on %s: %v", args[0], node, err)
	}
	out.Close()
	p := &proc{t: t, name: node + "/" + args[0], cmd: cmd, done: make(chan struct{}), log: logFile}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			cmd.Process.Kill() // only this test's own child, by PID
			<-p.done
		}
	})
	return p
}

// exit waits for the process to exit by itself and returns how it ended.
func (p *proc) exit(timeout time.Duration) error {
	p.t.Helper()
	select {
	case <-p.done:
		return p.err
	case <-time.After(timeout):
		p.cmd.Process.Kill()
		<-p.done
		p.t.Fatalf("%s did not finish in %v\n%s", p.name, timeout, p.logText())
		return nil
	}
}

// wait waits for the process to exit by itself and requires exit 0.
func (p *proc) wait(timeout time.Duration) {
	p.t.Helper()
	if err := p.exit(timeout); err != nil {
		p.t.Fatalf("%s: %v\n%s", p.name, err, p.logText())
	}
}

// stop sends SIGTERM and requires a clean exit 0.
func (p *proc) stop() {
	p.t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	p.wait(10 * time.Second)
}

func (p *proc) logText() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

// hostAddrs maps host names to their IPv4 addresses.
func hostAddrs(lab *emu.Lab) map[string]string {
	m := map[string]string{}
	for _, h := range lab.Graph.Hosts() {
		m[h.Name] = h.Addr.String()
	}
	return m
}

func readRecords(t *testing.T, dir string) *records.Set {
	t.Helper()
	s, err := records.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// peersArgs turns host names into --peer NAME=IP flags.
func peersArgs(lab *emu.Lab, hosts ...string) []string {
	addr := hostAddrs(lab)
	var a []string
	for _, h := range hosts {
		a = append(a, "--peer", h+"="+addr[h])
	}
	return a
}

func sampleLines(t *testing.T, dir, file string, n int) string {
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		return err.Error()
	}
	lines := strings.SplitN(string(b), "\n", n+1)
	return strings.Join(lines[:min(n, len(lines))], "\n")
}

var _ = testenv.RequireRoot

func writeFile(t *testing.T, name, text string) {
	t.Helper()
	if err := os.WriteFile(name, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}
