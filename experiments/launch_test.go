package experiments

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fabric-emu/fabric/hosts"
)

// A transport's program named relatively is the experiment file's
// neighbour however the file was named (here relative to the working
// directory, as `cd dir && fabric run experiment.yaml` names it); a bare
// name is too when the directory has it, and is otherwise found in PATH.
// run.json's and meta.json's path of the file is absolute.
func TestTransportProgramNextToTheFile(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"myt.py", "bin/mine"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(dir)
	spec, err := Parse("experiment.yaml", []byte(commandExperiment("./myt.py")), "")
	if err != nil {
		t.Fatal(err)
	}
	if spec.Dir != dir || spec.Path() != filepath.Join(dir, "experiment.yaml") {
		t.Errorf("Dir %q, Path %q; want %q and its experiment.yaml", spec.Dir, spec.Path(), dir)
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"./myt.py":    filepath.Join(dir, "myt.py"),
		"myt.py":      filepath.Join(dir, "myt.py"),
		"bin/mine":    filepath.Join(dir, "bin/mine"),
		"/bin/true":   "/bin/true",
		"sh":          sh,
		"../x/myt.py": filepath.Join(filepath.Dir(dir), "x/myt.py"),
	} {
		got, err := spec.program(name)
		if err != nil || got != want {
			t.Errorf("program(%q) = %q, %v; want %q", name, got, err, want)
		}
	}
	if _, err := spec.program("no-such-transport-anywhere"); err == nil || !strings.Contains(err.Error(), "not in PATH") {
		t.Errorf("a missing program: %v", err)
	}
}

func commandExperiment(program string) string {
	return `name: paths
lab:
  name: paths
  topology: {kind: star, hosts: 2}
  links: {rate: 100Mbit}
schemes:
  mine: {transport: {command: [` + program + `]}}
traffic: {pattern: dynamic, workload: homa_w2_google_search, client: h0, servers: rest, load: 0.1}
duration: 2s
`
}

// execProcess is a hosts.Process run in this namespace, for tests of how
// the runner stops processes.
type execProcess struct{ cmd *exec.Cmd }

func (p execProcess) PID() int                   { return p.cmd.Process.Pid }
func (p execProcess) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }
func (p execProcess) Wait() error                { return p.cmd.Wait() }

var _ hosts.Process = execProcess{}

// Processes that ignore SIGTERM are stopped together: all get SIGTERM at
// once and all are killed once the grace has passed, so stopping five
// takes one grace, not five.
func TestStopAllTogether(t *testing.T) {
	const n, grace = 5, 500 * time.Millisecond
	var procs []*proc
	for i := range n {
		cmd := exec.Command("sh", "-c", `trap '' TERM; echo ready; while :; do sleep 0.05; done`)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 6)
		out.Read(buf) // its trap is set once it prints
		procs = append(procs, newProc("p", string(rune('a'+i)), execProcess{cmd}, ""))
	}
	t0 := time.Now()
	killed := stopAll(procs, grace)
	took := time.Since(t0)
	if len(killed) != n {
		t.Errorf("%d of %d killed", len(killed), n)
	}
	// One at a time, the stop would take n graces.
	if took >= n*grace/2 {
		t.Errorf("stopping %d processes took %v; together it takes about one grace (%v), one by one %v", n, took, grace, n*grace)
	}
	for _, pr := range procs {
		if !pr.done() {
			t.Errorf("%s still running", pr.host)
		}
	}
}
