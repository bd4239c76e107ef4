package experiments

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fabric-emu/fabric/emu/emutest"
	"github.com/fabric-emu/fabric/hosts/transport"
	"github.com/fabric-emu/fabric/internal/testenv"
)

// pythonExample is the Python example transport, from this package.
var pythonExample, _ = filepath.Abs("../examples/transport-python/transport.py")

// The example experiments parse, and what their commands name is next
// to them: the Go example's program, the Python example's script (its
// command runs in the file's directory).
func TestExampleExperimentsParse(t *testing.T) {
	for f, scheme := range map[string]string{"../examples/transport/experiment.yaml": "mine", "../examples/transport-python/experiment.yaml": "python"} {
		spec, err := Load(f)
		if err != nil {
			t.Fatal(err)
		}
		argv := spec.Schemes[scheme].Transport.Command
		if p, err := spec.program(argv[0]); strings.Contains(argv[0], "/") && (err != nil || p != filepath.Join(spec.Dir, argv[0])) {
			t.Errorf("%s: program %q is %q (%v), not the file's neighbour", f, argv[0], p, err)
		}
		for _, a := range argv[1:] {
			if _, err := os.Stat(filepath.Join(spec.Dir, a)); err != nil {
				t.Errorf("%s: argument %q is not next to the file: %v", f, a, err)
			}
		}
	}
}

// The Python example, on a star with delay and 1 % loss, meets every rule
// of the contract: every message delivered exactly once, whole, and
// recorded by its receiver; and the loss was real, since it resent
// packets.
func TestCheckPythonExample(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireCommand(t, "python3")
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	res, err := CheckTransport(ctx, []string{"python3", pythonExample},
		CheckOptions{Delay: time.Millisecond, Loss: 0.01, Duration: 3 * time.Second, Dir: dir, LabPrefix: emutest.Prefix(t, "t7y")})
	if err != nil {
		t.Fatal(err)
	}
	logRules(t, res)
	if !res.Met() || res.Messages < 30 {
		t.Fatalf("the Python example broke a rule, or had too few messages (%d) to judge", res.Messages)
	}
	set, err := transport.ReadDir(filepath.Join(dir, "trial"))
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]float64{}
	for _, m := range set.Metrics {
		counts[m.Name] += m.Value
	}
	// Some 1 % of its packets were lost each way: of thousands, none
	// resent is a lossless lab.
	if counts["retransmitted"] == 0 || counts["data_sent"] < 500 {
		t.Errorf("metrics %v: want thousands of packets sent and some resent", counts)
	}
}

// Broken transports are judged broken on the rule they break, and on no
// rule they keep.
func TestCheckBrokenTransports(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireCommand(t, "python3")
	t.Parallel()
	// skipOne is the Python example with one message, the first each
	// host receives, never recorded.
	skipOne := filepath.Join(t.TempDir(), "skip_one.py")
	writeFile(t, skipOne, `import sys
sys.path.insert(0, `+`"`+filepath.Dir(pythonExample)+`"`+`)
import transport

record = transport.Transport.record

def record_but_one(self, inc, end_ns):
    if inc.m["id"] == min(self.receives):
        inc.recorded = True
        return
    record(self, inc, end_ns)

transport.Transport.record = record_but_one
transport.main()
`)
	const waitTERM = `trap 'exit 0' TERM; while :; do sleep 0.05; done`
	cases := []struct {
		name   string
		argv   []string
		broken string
		met    []string
	}{
		{"no-ready", []string{"/bin/sh", "-c", `sleep 30`}, ruleReady, nil},
		// printf's \173 is {, which a command line keeps for placeholders.
		{"malformed", []string{"/bin/sh", "-c", `echo ready; printf '\173"type": "flow", "id": 1}\n' > "$FABRIC_RECORDS"; ` + waitTERM},
			ruleSchema, []string{ruleReady, ruleRuns, ruleStops}},
		{"one-unrecorded", []string{"python3", skipOne}, ruleRecords, []string{ruleReady, ruleRuns, ruleStops, ruleSchema}},
		{"ignores-term", []string{"/bin/sh", "-c", `trap '' TERM; echo ready; while :; do sleep 0.05; done`}, ruleStops, []string{ruleReady, ruleRuns}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			prefix := emutest.Prefix(t, "t7k")
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			res, err := CheckTransport(ctx, c.argv, CheckOptions{Duration: time.Second, ReadyTimeout: 3 * time.Second, StopGrace: testGrace, LabPrefix: prefix})
			if err != nil {
				t.Fatal(err)
			}
			logRules(t, res)
			if res.Met() {
				t.Fatal("judged to meet the contract")
			}
			if res.Dir == "" {
				t.Error("a broken transport's files were not kept")
			}
			defer os.RemoveAll(res.Dir)
			for _, r := range res.Rules {
				switch {
				case r.Name == c.broken && r.Status != RuleBroken:
					t.Errorf("rule %q %s, want broken", r.Name, r.Status)
				case r.Name != c.broken && slices.Contains(c.met, r.Name) && r.Status != RuleMet:
					t.Errorf("rule %q %s, want met", r.Name, r.Status)
				}
			}
		})
	}
}

func logRules(t *testing.T, res *CheckResult) {
	t.Helper()
	for _, r := range res.Rules {
		t.Logf("%-11s %s: %s", r.Status, r.Name, strings.Join(r.Detail[:min(len(r.Detail), 3)], "; "))
	}
}
