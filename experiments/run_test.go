package experiments

import (
	"bytes"
	"cmp"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fabric-emu/fabric/emu/emutest"
	"github.com/fabric-emu/fabric/hosts"
	"github.com/fabric-emu/fabric/hosts/transport"
	"github.com/fabric-emu/fabric/internal/testenv"
	"github.com/fabric-emu/fabric/results/report"
)

// The privileged tests run real experiments: real labs, transports as
// processes in the host namespaces, captures and the LMM. Transports and
// probes are a fabric binary built once for the package (hosts.StartFabric
// runs $FABRIC_BINARY), and the interrupt test runs a whole sweep in a
// child process, this test binary re-executed, that it then stops with
// SIGINT.

const childEnv = "FABRIC_EXPERIMENTS_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" && len(os.Args) > 1 && os.Args[1] == "run" {
		os.Exit(runChild(os.Args[2:]))
	}
	os.Setenv(childEnv, "1")
	testenv.RunWithFabric(m, hosts.EnvFabricBinary)
}

// runChild is `fabric run FILE --out OUT` with a lab prefix: Ctrl-C (SIGINT)
// cancels the run exactly as in the command.
func runChild(args []string) int {
	file, out, prefix := args[0], args[1], args[2]
	spec, err := Load(file)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	_, err = Run(ctx, spec, Options{Out: out, LabPrefix: prefix, Seed: 3, Progress: os.Stderr})
	if err != nil {
		fmt.Fprintln(os.Stderr, "run:", err)
		if errors.Is(err, ErrInterrupted) {
			return 130
		}
		return 1
	}
	return 0
}

// runOnce runs spec once into a directory of the test's own (unless opt
// says where), with lab names of its own that the test checks are gone at
// its end (emutest.Prefix), within limit, and fails t on an error. It logs
// how long the run took and its progress lines.
func runOnce(t testing.TB, spec *Spec, opt Options, limit time.Duration) *Result {
	t.Helper()
	testenv.RequireRoot(t)
	if opt.Out == "" && opt.Resume == "" {
		opt.Out = t.TempDir()
	}
	if opt.LabPrefix == "" {
		opt.LabPrefix = emutest.Prefix(t, "t7")
	}
	var progress bytes.Buffer
	if opt.Progress == nil {
		opt.Progress = &progress
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	t0 := time.Now()
	res, err := Run(ctx, spec, opt)
	t.Logf("%s: %v\n%s", spec.Name, time.Since(t0).Round(time.Second), progress.String())
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// runQuick runs a built-in scenario's quick variant and checks the files
// every run and trial writes.
func runQuick(t *testing.T, name string) *Result {
	t.Helper()
	spec, err := Builtin(name)
	if err != nil {
		t.Fatal(err)
	}
	spec = spec.WithQuick()
	res := runOnce(t, spec, Options{Seed: max(spec.Seed, 1)}, 5*time.Minute) // the quick variant's seed, else 1
	for _, f := range []string{"summary.csv", "report.md", "run.json"} {
		if st, err := os.Stat(filepath.Join(res.Dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	rows := readCSV(t, filepath.Join(res.Dir, "summary.csv"))
	if want := len(spec.Points()) * spec.Trials; len(rows) != want+1 {
		t.Errorf("summary.csv has %d trial rows, want %d", len(rows)-1, want)
	}
	// One table row per point: points that differ in senders or size are
	// separate rows, not averaged together.
	if len(res.Report.Rows) != len(spec.Points()) {
		t.Errorf("report has %d rows for %d points", len(res.Report.Rows), len(spec.Points()))
	}
	for _, tr := range res.Trials {
		if _, err := os.Stat(filepath.Join(tr.Dir, completeMarker)); err != nil {
			t.Errorf("trial %s not marked complete", tr.Dir)
		}
		files := []string{"meta.json", "fidelity.json", "cpu.csv", "cpu-idle.png"}
		if spec.Measure.LMM != nil {
			files = append(files, "switch-latency-cdf.png", "lmm/"+spec.Measure.LMM.name()+".summary.json")
		}
		for _, f := range files {
			if _, err := os.Stat(filepath.Join(tr.Dir, f)); err != nil {
				t.Errorf("trial %s: %v", tr.Dir, err)
			}
		}
		// Delay lines come with the idle machine's timing of one, which a
		// flag for lateness compares with its limit.
		if spec.delayed() {
			var fid report.Fidelity
			if b, err := os.ReadFile(filepath.Join(tr.Dir, "fidelity.json")); err != nil || json.Unmarshal(b, &fid) != nil {
				t.Errorf("trial %s: fidelity.json: %v", tr.Dir, err)
			} else if d := fid.DelayLines; d == nil || d.Machine == nil || d.Machine.Spin < machineSpin {
				t.Errorf("trial %s: delay lines without the idle machine's timing: %+v", tr.Dir, d)
			}
		}
	}
	t.Logf("%s quick report:\n%s", name, res.Report.Markdown)
	return res
}

func readCSV(t *testing.T, path string) [][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// row finds a scheme's row (at load, for swept loads) in the report.
func row(t *testing.T, res *Result, scheme string, load float64) report.Row {
	t.Helper()
	for _, r := range res.Report.Rows {
		if r.Scheme == scheme && math.Abs(r.Load-load) < 1e-9 {
			return r
		}
	}
	t.Fatalf("no report row for %s at load %v", scheme, load)
	return report.Row{}
}

// HULL Table 1's ordering: DCTCP-30K's mean switch latency is below TCP
// drop-tail's (the paper: 153.9 µs against 1100.6 µs at 1 Gbit/s).
func TestQuickHULLTable1(t *testing.T) {
	testenv.RequireRoot(t)
	// A trial the fidelity monitor flagged is a stall the run measured.
	testenv.Retry(t, 2, 0, func(a *testenv.Attempt) {
		res := runQuick(t, "hull/table1")
		stalledTrials(a, res)
		tcp, dctcp := row(t, res, "tcp-droptail", 0), row(t, res, "dctcp-30k", 0)
		a.Logf("mean switch latency: tcp-droptail %.1f µs, dctcp-30k %.1f µs (99th %.1f / %.1f)", tcp.LatAvg, dctcp.LatAvg, tcp.LatP99, dctcp.LatP99)
		if !(dctcp.LatAvg < tcp.LatAvg) {
			a.Errorf("DCTCP-30K mean switch latency %.1f µs is not below TCP drop-tail's %.1f µs", dctcp.LatAvg, tcp.LatAvg)
		}
		if res.Paper == nil || len(res.Paper.Rows) != 2 {
			t.Errorf("no Table 1 comparison in the report")
		}
	})
}

// HULL Table 4's ordering at 40% load: mean switch latency falls from
// TCP drop-tail to DCTCP-30K, DCTCP-6K-Pacer and the PQ (the paper:
// 329.3, 78.3, 15.1 and 7.0 µs). The quick draw is one whose long
// responses share the client's port
// (TestQuickHULLDynamicSharesTheClientsPort), without which TCP keeps no
// queue at the switch.
func TestQuickHULLDynamic(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.Retry(t, 2, 0, func(a *testenv.Attempt) {
		res := runQuick(t, "hull/dynamic")
		stalledTrials(a, res)
		order := []string{"tcp-droptail", "dctcp-30k", "dctcp-6k-pacer", "dctcp-pq950-pacer"}
		var lat []float64
		for _, name := range order {
			lat = append(lat, row(t, res, name, 0.4).LatAvg)
		}
		a.Logf("40%% load mean switch latency: %s %.1f µs, %s %.1f µs, %s %.1f µs, %s %.1f µs",
			order[0], lat[0], order[1], lat[1], order[2], lat[2], order[3], lat[3])
		for i := 1; i < len(order); i++ {
			if !(lat[i] < lat[i-1]) {
				a.Errorf("%s's mean switch latency %.1f µs is not below %s's %.1f µs", order[i], lat[i], order[i-1], lat[i-1])
			}
		}
	})
}

// Every built-in scenario's quick variant plans without a lab: each point
// resolves its lab and draws a schedule of messages between the lab's own
// hosts, within the traffic's duration. What a
// lab then does with a schedule is the end-to-end tests' (one scenario of
// each kind of traffic: dynamic, incast, priority, permutation, static).
func TestQuickScenariosPlan(t *testing.T) {
	for _, name := range Builtins() {
		spec, err := Builtin(name)
		if err != nil {
			t.Fatal(err)
		}
		q := spec.WithQuick()
		q = q.scaledBy(q.runnableScale()) // as it runs: a file at the paper's scale runs scaled
		g, err := q.LabSpec.Resolve()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		hosts := map[string]bool{}
		for _, h := range hostNamesOf(g) {
			hosts[h] = true
		}
		for _, p := range q.Points() {
			s, err := q.Schedule(g, p, 1)
			if err != nil {
				t.Fatalf("%s, %+v: %v", name, p, err)
			}
			if s.Len() == 0 {
				t.Errorf("%s, point %+v: an empty schedule", name, p)
			}
			for i := range s.Len() {
				m := s.Message(i)
				if !hosts[m.Src] || !hosts[m.Dst] || m.Src == m.Dst || m.TimeNS < 0 || m.TimeNS >= q.Duration.Nanoseconds() {
					t.Fatalf("%s, point %+v: message %+v is not between two of the lab's hosts within %v", name, p, m, q.Duration)
				}
			}
		}
	}
}

const interruptExperiment = `name: interrupt
lab:
  name: intr
  topology: {kind: star, hosts: 3}
  links: {rate: 100Mbit}
schemes:
  tcp: {cc: cubic, ports: {buffer: 70KB}}
  dctcp: {cc: dctcp, ports: {buffer: 70KB, marking: {ecn: {threshold: 3KB}}}}
traffic: {pattern: static, client: [h1, h2], servers: h0}
duration: 3s
measure: {lmm: {switch: s0, from: [eth1, eth2], to: eth0}}
`

// SIGINT in the middle of the second trial: the process exits, its lab is
// gone (no namespaces, no state), the trial is marked incomplete, and
// --resume runs only what is missing and completes the run.
func TestInterruptAndResume(t *testing.T) {
	testenv.RequireRoot(t)
	// Exactness, not timing: it runs beside the other waiting tests.
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "interrupt.yaml")
	if err := os.WriteFile(file, []byte(interruptExperiment), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "runs")
	prefix := emutest.Prefix(t, "t7i")
	var stderr syncBuffer
	cmd := exec.Command(os.Args[0], "run", file, out, prefix)
	cmd.Env = append(os.Environ(), childEnv+"=1")
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill() // our own child, by PID
			<-done
		}
	})
	// Wait until the second trial's traffic runs, then interrupt.
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(stderr.String(), "[2/2]") {
		if time.Now().After(deadline) {
			t.Fatalf("second trial never started:\n%s", stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(1500 * time.Millisecond)
	if left := emutest.Leftovers(prefix); len(left) == 0 {
		t.Fatalf("no lab running mid-trial (test timing):\n%s", stderr.String())
	}
	cmd.Process.Signal(os.Interrupt)
	var err error
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("run did not stop within 30 s of SIGINT:\n%s", stderr.String())
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 130 {
		t.Fatalf("interrupted run exited with %v, want 130:\n%s", err, stderr.String())
	}
	if left := emutest.Leftovers(prefix); len(left) > 0 {
		t.Fatalf("SIGINT left lab resources: %v", left)
	}
	runs, _ := filepath.Glob(filepath.Join(out, "interrupt", "*"))
	if len(runs) != 1 {
		t.Fatalf("run directories: %v", runs)
	}
	runDir := runs[0]
	if _, err := os.Stat(filepath.Join(runDir, "dctcp", "trial-1", incompleteMarker)); err != nil {
		t.Errorf("interrupted trial not marked incomplete: %v", err)
	}
	if _, err := os.Stat(filepath.Join(runDir, "tcp", "trial-1", completeMarker)); err != nil {
		t.Fatalf("first trial not complete: %v", err)
	}
	firstMeta, _ := os.ReadFile(filepath.Join(runDir, "tcp", "trial-1", "meta.json"))

	spec, err := Load(file)
	if err != nil {
		t.Fatal(err)
	}
	res := runOnce(t, spec, Options{Resume: runDir, LabPrefix: prefix}, 2*time.Minute)
	if res.Skipped != 1 || len(res.Trials) != 2 || res.Seed != 3 {
		t.Errorf("resume: skipped %d, trials %d, seed %d; want 1, 2, 3", res.Skipped, len(res.Trials), res.Seed)
	}
	if again, _ := os.ReadFile(filepath.Join(runDir, "tcp", "trial-1", "meta.json")); !bytes.Equal(again, firstMeta) {
		t.Error("resume reran a complete trial")
	}
	if _, err := os.Stat(filepath.Join(runDir, "dctcp", "trial-1", incompleteMarker)); err == nil {
		t.Error("resumed trial still marked incomplete")
	}
	if _, err := os.Stat(filepath.Join(runDir, "summary.csv")); err != nil {
		t.Error(err)
	}
}

// syncBuffer lets the test read a child's stderr while it is written.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *syncBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

const reproExperiment = `name: repro
lab:
  name: repro
  topology: {kind: star, hosts: 3}
  links: {rate: 100Mbit}
schemes:
  tcp: {cc: cubic}
traffic: {pattern: dynamic, workload: hull_1k_10m, client: h0, servers: rest, conns: 2, load: 0.3}
duration: 3s
measure:
  probe: {from: h1, to: h0}
  lmm: {switch: s0, from: [eth1], to: eth0, probes: true}
`

// A trial carries the schedule the plan draws from its seed, message for
// message: the files it gave the transports are what Spec.Schedule
// computes without a lab (TestScheduleSameSeedSameBytes shows that the
// same seed draws the same schedule and another seed another). The probe
// stream and the LMM's probe mode run along.
func TestTrialCarriesThePlannedSchedule(t *testing.T) {
	testenv.RequireRoot(t)
	// Exactness, not timing: it runs beside the other waiting tests.
	t.Parallel()
	spec, err := Parse("repro.yaml", []byte(reproExperiment), "")
	if err != nil {
		t.Fatal(err)
	}
	a := runOnce(t, spec, Options{Seed: 11}, time.Minute)
	if len(a.Trials) != 1 {
		t.Fatalf("%d trials", len(a.Trials))
	}
	got := scheduleOf(t, a.Trials[0].Dir)
	g, err := spec.LabSpec.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	var meta struct {
		Seed uint64 `json:"seed"`
	}
	if b, err := os.ReadFile(filepath.Join(a.Trials[0].Dir, "meta.json")); err != nil || json.Unmarshal(b, &meta) != nil || meta.Seed == 0 {
		t.Fatalf("meta.json: no trial seed (%v)", err)
	}
	plan, err := spec.Schedule(g, spec.Points()[0], meta.Seed)
	if err != nil {
		t.Fatal(err)
	}
	var want []transport.Message
	for i := range plan.Len() {
		want = append(want, plan.Message(i))
	}
	slices.SortFunc(want, func(x, y transport.Message) int { return cmp.Compare(x.ID, y.ID) })
	if len(got) < 3 || !slices.Equal(got, want) {
		t.Errorf("the trial's schedule has %d messages, the plan's %d, and they differ", len(got), len(want))
	}
	if l := a.Trials[0].LMM; l == nil || l.Matched < 1000 {
		t.Errorf("probe LMM matched %v, want ~3000 probes (1 per ms for 3 s)", l)
	}
}
