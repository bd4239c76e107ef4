package hosts_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fabric-emu/fabric/internal/netnsutil"

	"github.com/fabric-emu/fabric/hosts"
	"github.com/fabric-emu/fabric/hosts/hoststest"
	"github.com/fabric-emu/fabric/internal/testenv"
)

func TestStartInNetNS(t *testing.T) {
	testenv.RequireRoot(t)
	lab := hoststest.UniqueName()
	path := newTestNetNS(t, netnsutil.Name(lab, "h1"))
	ref := hosts.Ref{Lab: lab, Node: "h1", NetNS: path, Runtime: "netns"}
	ownNS := nsInode(t, "/proc/self/ns/net")
	hostNS := nsInode(t, path)
	if ownNS == hostNS {
		t.Fatal("test namespace is the test's own")
	}
	logPath := filepath.Join(t.TempDir(), "run", "h1.log") // directory made by Start

	// The child reports its namespace, then waits to be stopped.
	p, err := hosts.Start(context.Background(), ref, []string{"/bin/sh", "-c", "echo started; readlink /proc/self/ns/net; echo to-stderr >&2; exec sleep 60"}, logPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Signal(syscall.SIGKILL); p.Wait() })
	if got := nsInode(t, fmt.Sprintf("/proc/%d/ns/net", p.PID())); got != hostNS {
		t.Errorf("process is in namespace %d, want the host's %d", got, hostNS)
	}
	// Starting must not leave any of the test's threads in the namespace.
	assertThreadsIn(t, ownNS)

	waitForLog(t, logPath, "to-stderr")
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err = hoststest.WaitWithin(t, p, 10*time.Second)
	var ee *hosts.ExitError
	if !errors.As(err, &ee) || ee.Code != -1 || ee.Status != "signal: terminated" || ee.Host != "h1" {
		t.Fatalf("Wait after SIGTERM = %#v, want an ExitError for signal terminated", err)
	}
	if err := p.Wait(); !errors.As(err, &ee) {
		t.Errorf("second Wait = %v, want the same ExitError", err)
	}
	if err := p.Signal(syscall.SIGTERM); !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("Signal after exit = %v, want os.ErrProcessDone", err)
	}
	log, _ := os.ReadFile(logPath)
	want := fmt.Sprintf("started\nnet:[%d]\nto-stderr\n", hostNS)
	if string(log) != want {
		t.Errorf("log = %q, want %q", log, want)
	}

	// Exit codes come back; logs append.
	p, err = hosts.Start(context.Background(), ref, []string{"/bin/sh", "-c", "echo second; exit 3"}, logPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := hoststest.WaitWithin(t, p, 10*time.Second); !errors.As(err, &ee) || ee.Code != 3 {
		t.Fatalf("Wait = %v, want exit code 3", err)
	}
	if log, _ := os.ReadFile(logPath); !strings.HasSuffix(string(log), "to-stderr\nsecond\n") {
		t.Errorf("log after second process = %q, want it appended", log)
	}

	// A program that does not exist fails Start, naming the host.
	if _, err := hosts.Start(context.Background(), ref, []string{"/nonexistent/thr-prog"}, ""); err == nil || !strings.Contains(err.Error(), "host h1") {
		t.Errorf("Start of a missing program = %v, want an error naming host h1", err)
	}
	// So does a namespace that does not exist.
	gone := ref
	gone.NetNS = path + "-missing"
	if _, err := hosts.Start(context.Background(), gone, []string{"/bin/true"}, ""); err == nil || !strings.Contains(err.Error(), gone.NetNS) {
		t.Errorf("Start in a missing namespace = %v", err)
	}
	assertThreadsIn(t, ownNS)
}

// StartFabric on a netns host runs $FABRIC_BINARY, here the fabric binary
// itself: `fabric sleep` runs until SIGTERM and then exits 0.
func TestStartFabricNetNS(t *testing.T) {
	testenv.RequireRoot(t)
	bin, err := hoststest.FabricBinary()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(hosts.EnvFabricBinary, bin)
	lab := hoststest.UniqueName()
	ref := hosts.Ref{Lab: lab, Node: "h2", NetNS: newTestNetNS(t, netnsutil.Name(lab, "h2"))}
	logPath := filepath.Join(t.TempDir(), "h2.log")
	p, err := hosts.StartFabric(context.Background(), ref, []string{"sleep"}, logPath)
	if err != nil {
		t.Fatal(err)
	}
	if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", p.PID())); exe != bin {
		t.Errorf("process runs %q, want %s", exe, bin)
	}
	waitForLog(t, logPath, hosts.SleepReady) // before that, SIGTERM would kill it
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := hoststest.WaitWithin(t, p, 10*time.Second); err != nil {
		t.Fatalf("fabric sleep after SIGTERM: %v, want exit 0", err)
	}
}

func TestExecInNetNS(t *testing.T) {
	testenv.RequireRoot(t)
	lab := hoststest.UniqueName()
	ref := hosts.Ref{Lab: lab, Node: "h3", NetNS: newTestNetNS(t, netnsutil.Name(lab, "h3"))}
	var out bytes.Buffer
	err := hosts.Exec(context.Background(), ref, []string{"/bin/sh", "-c", "read line; echo got $line; readlink /proc/self/ns/net; exit 4"},
		strings.NewReader("hello\n"), &out, &out)
	var ee *hosts.ExitError
	if !errors.As(err, &ee) || ee.Code != 4 {
		t.Fatalf("Exec = %v, want exit code 4", err)
	}
	want := fmt.Sprintf("got hello\nnet:[%d]\n", nsInode(t, ref.NetNS))
	if out.String() != want {
		t.Errorf("output %q, want %q", out.String(), want)
	}
}

// assertThreadsIn checks every thread of the test process is in namespace
// ino: a thread left in a host namespace would run unrelated goroutines
// there.
func assertThreadsIn(t *testing.T, ino uint64) {
	t.Helper()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		link, err := os.Readlink(filepath.Join("/proc/self/task", task.Name(), "ns/net"))
		if err != nil {
			continue // thread exited meanwhile
		}
		if link != fmt.Sprintf("net:[%d]", ino) {
			t.Errorf("thread %s is in %s, want net:[%d]", task.Name(), link, ino)
		}
	}
}

func waitForLog(t *testing.T, path, text string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if b, _ := os.ReadFile(path); strings.Contains(string(b), text) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	b, _ := os.ReadFile(path)
	t.Fatalf("log %s never contained %q: %q", path, text, b)
}
