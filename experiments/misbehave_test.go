package experiments

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fabric-emu/fabric/emu/emutest"
	"github.com/fabric-emu/fabric/hosts"
	"github.com/fabric-emu/fabric/internal/testenv"
)

// A user's transport that misbehaves fails its trial with an error that
// names the scheme and the host (and, for records, the file and line);
// the trial is marked incomplete and nothing is left behind: no
// namespaces, no lab state, no process.
func TestMisbehavingTransports(t *testing.T) {
	testenv.RequireRoot(t)
	t.Parallel()
	// marker is in every command line the test starts, so that leftovers
	// can be found by it (and only ours).
	marker := fmt.Sprintf("fabric-misbehave-%d", os.Getpid())
	// waitTERM keeps a well-behaved shell transport alive until SIGTERM.
	const waitTERM = `trap 'exit 0' TERM; while :; do sleep 0.05; done`
	cases := []struct {
		name, script string
		argv         []string // instead of sh -c script
		want         []string
	}{
		{name: "cannot-start", argv: []string{"/nonexistent/" + marker},
			want: []string{"scheme bad", "host h"}},
		{name: "exits-early", script: `exit 3`,
			want: []string{"scheme bad", "host h", "exited with status 3 before its ready line"}},
		{name: "no-ready", script: `sleep 30`,
			want: []string{"scheme bad", "host h", `no "ready" line`}},
		// printf's \173 and \175 are { and }, which a command line
		// keeps for placeholders.
		{name: "malformed", script: `echo ready; printf '\173"type": "flow", "id": \n' > "$FABRIC_RECORDS"; ` + waitTERM,
			want: []string{"scheme bad", ".jsonl:1: malformed record"}},
		{name: "unscheduled", script: `echo ready; printf '\173"type":"flow","id":99999999,"src":"h1","dst":"h0","size":1,"bytes":1,"start_ns":1,"end_ns":2\175\n' > "$FABRIC_RECORDS"; ` + waitTERM,
			want: []string{"scheme bad", ".jsonl:1: a record of message 99999999"}},
		{name: "ignores-term", script: `trap '' TERM; echo ready; while :; do sleep 0.05; done`,
			want: []string{"scheme bad", "host h", "SIGTERM"}},
	}
	t.Cleanup(func() {
		if procs := processesWith(marker); len(procs) > 0 {
			t.Errorf("processes left behind: %v", procs)
		}
	})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			// Each case has its own labs and marker: the others run at once.
			prefix, marker := emutest.Prefix(t, "t7m"), marker+"-"+c.name
			argv := c.argv
			if argv == nil {
				argv = []string{"/bin/sh", "-c", c.script, marker}
			}
			spec := commandSpec(t, "bad", argv)
			// One launch with a short allowance: the relaunch after a
			// missed first try is TestSlowStartingTransportsLaunchedAgain's.
			bad := spec.Schemes["bad"]
			bad.ReadyTimeout = Duration(2 * time.Second)
			bad.StopGrace = Duration(testGrace)
			spec.Schemes["bad"] = bad
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			out := t.TempDir()
			_, err := Run(ctx, spec, Options{Out: out, LabPrefix: prefix, Seed: 1})
			if err == nil {
				t.Fatal("the run succeeded")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			marks, _ := filepath.Glob(filepath.Join(out, "*", "*", "*", "trial-1", incompleteMarker))
			if len(marks) != 1 {
				t.Errorf("trial not marked incomplete (%v)", marks)
			}
			if left := emutest.Leftovers(prefix); len(left) > 0 {
				t.Errorf("lab resources left behind: %v", left)
			}
			if procs := processesWith(marker); len(procs) > 0 {
				t.Errorf("processes left behind: %v", procs)
			}
		})
	}
}

// testGrace is the stop_grace of tests of what follows SIGTERM's grace (a
// kill, a failed trial, who is named), which does not depend on its
// length: the contract's 10 s would make each of them wait 10 s.
const testGrace = 2 * time.Second

// processesWith lists the PIDs whose command line holds s.
func processesWith(s string) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(b), s) && e.Name() != fmt.Sprint(os.Getpid()) {
			out = append(out, e.Name()+": "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return out
}

// A transport not ready by the first, short start instant is stopped and
// launched again with the full allowance; the trial then runs as if the
// first launch had never been: one ready line in each log, every message
// recorded. The script is slow only on its first launch (it leaves a
// marker in the run directory), slower than the full allowance, so only a
// second launch can pass; fabric's own tcp transport does the work.
func TestSlowStartingTransportsLaunchedAgain(t *testing.T) {
	testenv.RequireRoot(t)
	t.Parallel()
	bin, err := hosts.FabricBinary()
	if err != nil {
		t.Fatal(err)
	}
	// The first launch waits in `wait`, which a trapped SIGTERM
	// interrupts, so its sleep does not outlive it.
	script := `m="$FABRIC_RUN_DIR/launched-$FABRIC_HOST"; if [ ! -e "$m" ]; then touch "$m"; trap 'kill $!; exit 0' TERM; sleep 12 & wait $!; fi; exec "$0" transport tcp`
	spec := commandSpec(t, "slow", []string{"/bin/sh", "-c", script, bin})
	res := runOnce(t, spec, Options{Seed: 1}, 2*time.Minute)
	tr := res.Trials[0]
	for _, h := range []string{"h0", "h1"} {
		if _, err := os.Stat(filepath.Join(tr.Dir, "launched-"+h)); err != nil {
			t.Errorf("%s: the first launch left no marker: %v", h, err)
		}
		b, err := os.ReadFile(filepath.Join(tr.Dir, "logs", h+".transport.log"))
		if err != nil {
			t.Fatal(err)
		}
		ready := 0
		for _, l := range strings.Split(string(b), "\n") {
			if l == "ready" {
				ready++
			}
		}
		if ready != 1 {
			t.Errorf("%s: %d ready lines in its log, want the second launch's only:\n%s", h, ready, b)
		}
	}
	if n := tr.Fidelity.IncompleteFlows; n > 0 {
		t.Errorf("%d messages incomplete after the second launch", n)
	}
	if tr.SlowdownAll == nil || tr.SlowdownAll.N == 0 {
		t.Error("no message recorded")
	}
	if procs := processesWith(`launched-$FABRIC_HOST`); len(procs) > 0 {
		t.Errorf("processes left behind: %v", procs)
	}
}

// commandSpec is a two-host experiment (h1 sends to h0) whose one scheme,
// name, runs argv as a user's transport.
func commandSpec(t *testing.T, name string, argv []string) *Spec {
	t.Helper()
	quoted := make([]string, len(argv))
	for i, a := range argv {
		quoted[i] = fmt.Sprintf("%q", a)
	}
	spec, err := Parse(name+".yaml", []byte(fmt.Sprintf(`name: %[1]s
lab:
  name: %[1]s
  topology: {kind: star, hosts: 2}
  links: {rate: 100Mbit}
schemes:
  %[1]s: {transport: {command: [%[2]s]}}
traffic: {pattern: dynamic, workload: homa_w2_google_search, client: h0, servers: rest, load: 0.1}
duration: 2s
`, name, strings.Join(quoted, ", "))), "")
	if err != nil {
		t.Fatal(err)
	}
	return spec
}
