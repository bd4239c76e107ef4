package experiments

import (
	"bytes"
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
	"strings"
	"sync"
	"testing"
	"time"

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

// testPrefix makes this process's lab names unique among concurrent tests.
func testPrefix(tag string) string { return fmt.Sprintf("t7%s%d", tag, os.Getpid()%1000) }

// labLeftovers lists namespaces and lab state directories of labs whose
// name starts with prefix.
func labLeftovers(t *testing.T, prefix string) []string {
	t.Helper()
	var left []string
	for _, pat := range []string{"/run/netns/fab." + prefix + "*", "/run/fabric/" + prefix + "*"} {
		m, _ := filepath.Glob(pat)
		left = append(left, m...)
	}
	return left
}

// runQuick runs a built-in scenario's quick variant into a temp dir.
// checkedPrefix is a lab prefix of the test's own, and fails the test if
// any resource with it is left when the test ends.
func checkedPrefix(t *testing.T, letter string) string {
	prefix := testPrefix(letter)
	t.Cleanup(func() {
		if left := labLeftovers(t, prefix); len(left) > 0 {
			t.Errorf("lab resources left behind: %v", left)
		}
	})
	return prefix
}

func runQuick(t *testing.T, name string) *Result {
	t.Helper()
	spec, err := Builtin(name)
	if err != nil {
		t.Fatal(err)
	}
	spec = spec.WithQuick()
	prefix := checkedPrefix(t, "q")
	var progress bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	t0 := time.Now()
	res, err := Run(ctx, spec, Options{Out: t.TempDir(), LabPrefix: prefix, Seed: 1, Progress: &progress})
	t.Logf("%s quick: %v\n%s", name, time.Since(t0).Round(time.Second), progress.String())
	if err != nil {
		t.Fatal(err)
	}
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
			var fid FidelityRecord
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
	res := runQuick(t, "hull/table1")
	tcp, dctcp := row(t, res, "tcp-droptail", 0), row(t, res, "dctcp-30k", 0)
	t.Logf("mean switch latency: tcp-droptail %.1f µs, dctcp-30k %.1f µs (99th %.1f / %.1f)", tcp.LatAvg, dctcp.LatAvg, tcp.LatP99, dctcp.LatP99)
	if !(dctcp.LatAvg < tcp.LatAvg) {
		t.Errorf("DCTCP-30K mean switch latency %.1f µs is not below TCP drop-tail's %.1f µs", dctcp.LatAvg, tcp.LatAvg)
	}
	if res.Paper == nil || len(res.Paper.Rows) != 2 {
		t.Errorf("no Table 1 comparison in the report")
	}
}

// HULL Table 4's ordering at 40% load: the PQ's mean switch latency is below
// DCTCP-30K's (the paper: 7.0 µs against 78.3 µs).
func TestQuickHULLDynamic(t *testing.T) {
	testenv.RequireRoot(t)
	res := runQuick(t, "hull/dynamic")
	dctcp, pq := row(t, res, "dctcp-30k", 0.4), row(t, res, "dctcp-pq950-pacer", 0.4)
	t.Logf("40%% load mean switch latency: dctcp-30k %.1f µs, dctcp-pq950-pacer %.1f µs", dctcp.LatAvg, pq.LatAvg)
	if !(pq.LatAvg < dctcp.LatAvg) {
		t.Errorf("PQ mean switch latency %.1f µs is not below DCTCP-30K's %.1f µs", pq.LatAvg, dctcp.LatAvg)
	}
}

// The other built-in scenarios' quick variants run end to end and report.
func TestQuickOtherScenarios(t *testing.T) {
	testenv.RequireRoot(t)
	for _, name := range []string{"hull/pq-sweep", "hull/static", "hull/qos", "incast/fattree-k4", "permutation/fattree-k4"} {
		t.Run(strings.ReplaceAll(name, "/", "-"), func(t *testing.T) {
			res := runQuick(t, name)
			switch {
			case strings.HasPrefix(name, "incast"):
				for _, r := range res.Report.Rows {
					if math.IsNaN(r.QCTAvg) || r.QCTAvg <= 0 {
						t.Errorf("%s: no query completion times", r.Scheme)
					}
				}
			case strings.HasPrefix(name, "permutation"):
				for _, r := range res.Report.Rows {
					// Per-flow ECMP collisions: the mean is below line rate
					// but every flow moved data.
					if !(r.Utilization > 0 && r.Utilization < 1) || !(r.TputMin > 0) {
						t.Errorf("%s: utilization %v, slowest flow %v Mbit/s", r.Scheme, r.Utilization, r.TputMin)
					}
				}
			default:
				for _, r := range res.Report.Rows {
					if math.IsNaN(r.LatAvg) {
						t.Errorf("%s: no switch latency", r.Scheme)
					}
				}
			}
		})
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
	dir := t.TempDir()
	file := filepath.Join(dir, "interrupt.yaml")
	if err := os.WriteFile(file, []byte(interruptExperiment), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "runs")
	prefix := checkedPrefix(t, "i")
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
	if left := labLeftovers(t, prefix); len(left) == 0 {
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
	if left := labLeftovers(t, prefix); len(left) > 0 {
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
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := Run(ctx, spec, Options{Resume: runDir, LabPrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
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

// requests reads the client's flow records in request order.
func requests(t *testing.T, res *Result) []transport.Flow {
	t.Helper()
	if len(res.Trials) != 1 {
		t.Fatalf("%d trials", len(res.Trials))
	}
	return startedRequests(t, res.Trials[0].Dir)
}

// A rerun with the same seed draws the same flow sizes, servers and
// arrival times; another seed draws differently. The probe stream and the
// LMM's probe mode run along.
func TestSameSeedSameDraws(t *testing.T) {
	testenv.RequireRoot(t)
	spec, err := Parse("repro.yaml", []byte(reproExperiment), "")
	if err != nil {
		t.Fatal(err)
	}
	prefix := checkedPrefix(t, "r")
	run := func(seed uint64) *Result {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		res, err := Run(ctx, spec, Options{Out: t.TempDir(), LabPrefix: prefix, Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	a, b, c := run(11), run(11), run(12)
	fa, fb, fc := requests(t, a), requests(t, b), requests(t, c)
	if len(fa) < 3 {
		t.Fatalf("only %d requests in 3 s", len(fa))
	}
	same := func(x, y []transport.Flow) (bool, string) {
		if len(x) != len(y) {
			return false, fmt.Sprintf("%d vs %d requests", len(x), len(y))
		}
		for i := range x {
			dx, dy := x[i].StartNS-x[0].StartNS, y[i].StartNS-y[0].StartNS
			if x[i].Size != y[i].Size || x[i].Src != y[i].Src || math.Abs(float64(dx-dy)) > 20e6 {
				return false, fmt.Sprintf("request %d: %s %dB at +%v vs %s %dB at +%v", i, x[i].Src, x[i].Size,
					time.Duration(dx), y[i].Src, y[i].Size, time.Duration(dy))
			}
		}
		return true, ""
	}
	if ok, why := same(fa, fb); !ok {
		t.Errorf("same seed, different draws: %s", why)
	}
	if ok, _ := same(fa, fc); ok {
		t.Errorf("seeds 11 and 12 drew the same %d requests", len(fa))
	}
	t.Logf("seed 11: %d requests twice alike; seed 12: %d requests", len(fa), len(fc))
	if l := a.Trials[0].LMM; l == nil || l.Matched < 1000 {
		t.Errorf("probe LMM matched %v, want ~3000 probes (1 per ms for 3 s)", l)
	}
}
