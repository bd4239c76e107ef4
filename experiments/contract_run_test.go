package experiments

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fabric-emu/fabric/emu/emutest"
	"github.com/fabric-emu/fabric/hosts"
	"github.com/fabric-emu/fabric/internal/testenv"
	"github.com/fabric-emu/fabric/results/report"
)

// A sweep goes on past a broken scheme: its failing trial is marked
// incomplete with its reason, naming the first host to fail and what it
// did; after it failed on two points in a row its later points are not
// run; the good scheme's every point is reported, and the report lists
// the failures.
func TestSweepGoesOnPastABrokenScheme(t *testing.T) {
	testenv.RequireRoot(t)
	t.Parallel()
	// h2 exits first, after its ready line and before the start instant;
	// the others a little later. The sweep asks for no more than two
	// senders' lab: h0 requests from h1 and h2.
	script := `echo ready; if [ "$FABRIC_HOST" = h2 ]; then sleep 0.1; else sleep 0.4; fi; exit 4`
	file := filepath.Join(t.TempDir(), "sweep.yaml")
	writeFile(t, file, fmt.Sprintf(`name: sweep
lab:
  name: sweep
  topology: {kind: star, hosts: 3}
  links: {rate: 100Mbit}
schemes:
  good: {cc: cubic}
  bad:  {transport: {command: [/bin/sh, -c, %q]}}
traffic: {pattern: dynamic, workload: homa_w2_google_search, client: h0, servers: rest}
sweep: {load: [0.05, 0.1, 0.15]}
duration: 1s
`, script))
	spec, err := Load(file)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := Run(ctx, spec, Options{Out: t.TempDir(), LabPrefix: emutest.Prefix(t, "t7b"), Seed: 2})
	if !errors.Is(err, ErrTrialsFailed) {
		t.Fatalf("run error %v, want one wrapping ErrTrialsFailed", err)
	}
	want := "scheme bad (transport sh), host h2: exited with status 4 after its ready line, before the start"
	if !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not say %q", err, want)
	}
	var good []string
	for _, tr := range res.Trials {
		good = append(good, tr.Point)
	}
	slices.Sort(good)
	if !slices.Equal(good, []string{"good_load10", "good_load15", "good_load5"}) {
		t.Errorf("completed trials %v, want every point of good", good)
	}
	var failed []string
	for _, f := range res.Failed {
		failed = append(failed, f.Point+": "+f.Reason)
	}
	if len(failed) != 3 || !strings.Contains(failed[2], "bad_load5: scheme bad") || !strings.Contains(failed[0], "bad_load10: scheme bad") ||
		!strings.Contains(failed[1], "bad_load15: not run: scheme bad failed on bad_load5 and bad_load10 in a row") {
		t.Errorf("failures:\n%s", strings.Join(failed, "\n"))
	}
	md, err := os.ReadFile(filepath.Join(res.Dir, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(md), "## Failed") || !strings.Contains(string(md), want) || !strings.Contains(string(md), "| good |") {
		t.Errorf("report.md lacks good's rows or the Failed section:\n%s", md)
	}
}

// Five transports that ignore SIGTERM get it together and are killed
// together, one grace after it, not one host after another.
func TestTransportsStoppedTogether(t *testing.T) {
	testenv.RequireRoot(t)
	t.Parallel()
	// The trap records when SIGTERM came and ignores it otherwise.
	script := `trap 'date +%s%N >> "$FABRIC_RUN_DIR/term-$FABRIC_HOST"' TERM; echo ready; while :; do sleep 0.05; done`
	spec, err := Parse("stop.yaml", []byte(fmt.Sprintf(`name: stop
lab:
  name: stop
  topology: {kind: star, hosts: 5}
  links: {rate: 100Mbit}
schemes:
  deaf: {transport: {command: [/bin/sh, -c, %q]}, ready_timeout: 3s, stop_grace: %v}
traffic: {pattern: dynamic, workload: homa_w2_google_search, client: h0, servers: rest, load: 0.05}
duration: 1s
`, script, testGrace)), "")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out := t.TempDir()
	t0 := time.Now()
	_, err = Run(ctx, spec, Options{Out: out, LabPrefix: emutest.Prefix(t, "t7d"), Seed: 1})
	took := time.Since(t0)
	if !errors.Is(err, ErrTrialsFailed) || !strings.Contains(err.Error(), fmt.Sprintf("did not exit within %v of SIGTERM; killed", testGrace)) {
		t.Fatalf("run error %v, want the trial failed for SIGTERM", err)
	}
	for _, h := range []string{"h1", "h2", "h3", "h4"} {
		if !strings.Contains(err.Error(), h) {
			t.Errorf("error %q does not name %s", err, h)
		}
	}
	terms, _ := filepath.Glob(filepath.Join(out, "*", "*", "*", "trial-1", "term-h*"))
	var first, last int64
	for _, f := range terms {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		ns, err := strconv.ParseInt(strings.Fields(string(b))[0], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		if first == 0 || ns < first {
			first = ns
		}
		last = max(last, ns)
	}
	if len(terms) != 5 {
		t.Fatalf("%d hosts recorded SIGTERM, want 5: %v", len(terms), terms)
	}
	// One host after another, they would be a grace apart.
	if spread := time.Duration(last - first); spread > testGrace/4 {
		t.Errorf("SIGTERM reached the hosts over %v; together, it is one loop's sleep", spread)
	}
	t.Logf("the trial with 5 hosts ignoring SIGTERM took %v (its grace: %v)", took.Round(100*time.Millisecond), testGrace)
}

// `cd dir && fabric run experiment.yaml` runs a command named relative to
// the file, bare or with a path, in the file's directory; meta.json
// records the program's and the file's absolute paths.
func TestRelativeTransportCommand(t *testing.T) {
	testenv.RequireRoot(t)
	bin, err := hosts.FabricBinary()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// The transport is fabric's tcp, after it says where it runs.
	writeFile(t, filepath.Join(dir, "myt.sh"), "#!/bin/sh\npwd > \"$FABRIC_RUN_DIR/pwd-$FABRIC_HOST\"\nexec \"$1\" transport tcp\n")
	if err := os.Chmod(filepath.Join(dir, "myt.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "experiment.yaml"), commandExperiment(fmt.Sprintf("myt.sh, %q", bin)))
	out := t.TempDir()
	t.Chdir(dir)
	spec, err := Load("experiment.yaml")
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(out) // the file was named relative to a directory fabric has left
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := Run(ctx, spec, Options{Out: out, LabPrefix: emutest.Prefix(t, "t7p"), Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	tr := res.Trials[0]
	if n := tr.SlowdownAll; n == nil || n.N == 0 {
		t.Error("no message recorded")
	}
	pwd, err := os.ReadFile(filepath.Join(tr.Dir, "pwd-h1"))
	if err != nil || strings.TrimSpace(string(pwd)) != dir {
		t.Errorf("the transport ran in %q (%v), want the experiment's directory %s", pwd, err, dir)
	}
	var meta struct {
		File      string     `json:"file"`
		Endpoints [][]string `json:"endpoints"`
	}
	b, err := os.ReadFile(filepath.Join(tr.Dir, report.MetaFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &meta); err != nil {
		t.Fatal(err)
	}
	if meta.File != filepath.Join(dir, "experiment.yaml") {
		t.Errorf("meta.json file %q, want %s", meta.File, filepath.Join(dir, "experiment.yaml"))
	}
	for _, argv := range meta.Endpoints {
		if argv[0] != filepath.Join(dir, "myt.sh") {
			t.Errorf("meta.json endpoint %q, want the program's absolute path", argv)
		}
	}
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}
