package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fabric-emu/fabric/emu/emutest"
	"github.com/fabric-emu/fabric/internal/testenv"
	"github.com/fabric-emu/fabric/results/report"
)

// A sweep run as bundles, one fabric trial process per bundle in shuffled
// order, carries byte for byte the schedules of fabric run of the same
// file and seed, and its report has the same rows, each within the noise
// of the two trials' own throughput over time.
func TestBundlesMatchRun(t *testing.T) {
	testenv.RequireRoot(t)
	bin := fabricBinary(t)
	dir := t.TempDir()
	prefix := emutest.Prefix(t, "bq")
	exp := filepath.Join(dir, "two.yaml")
	const two = `name: bundle-equivalence
lab: {name: beq, topology: {kind: star, hosts: 3}, links: {rate: 20Mbit}}
schemes:
  cubic: {cc: cubic}
  dctcp: {cc: dctcp, ports: {marking: {ecn: {threshold: 30KB}}}}
traffic: {pattern: static, client: [h1, h2], servers: h0, flows: 1}
duration: 3s
trials: 1
seed: 11
`
	if err := os.WriteFile(exp, []byte(two), 0o644); err != nil {
		t.Fatal(err)
	}
	// A stall of the machine stops both flows for its length, a share
	// stall/3 s of their throughput: 10 ms takes 0.03 Mbit/s of 9.5, the
	// order of the four standard errors the rows are compared within.
	testenv.Retry(t, 2, 10*time.Millisecond, func(a *testenv.Attempt) { bundlesMatchRun(a, bin, exp, filepath.Join(dir, strconv.Itoa(a.N)), prefix) })
}

// bundlesMatchRun is one attempt of TestBundlesMatchRun in dir.
func bundlesMatchRun(a *testenv.Attempt, bin, exp, dir, prefix string) {
	fabric := func(args ...string) string {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
		if err != nil {
			a.Fatalf("fabric %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	fabric("run", exp, "--out", filepath.Join(dir, "runs"), "--calibrate=false", "--lab-prefix", prefix)
	runDirs, _ := filepath.Glob(filepath.Join(dir, "runs", "bundle-equivalence", "*"))
	if len(runDirs) != 1 {
		a.Fatalf("run directories %v", runDirs)
	}
	bundles := filepath.Join(dir, "bundles")
	fabric("run", exp, "--bundle", bundles)
	out := filepath.Join(dir, "results")
	for _, i := range rand.Perm(2) {
		fabric("trial", bundles, "--index", strconv.Itoa(i), "--out", out, "--lab-prefix", prefix)
	}
	a.Logf("fabric report of the bundles' trials:\n%s", fabric("report", out))
	for _, point := range []string{"cubic", "dctcp"} {
		x, y := schedules(a, filepath.Join(runDirs[0], point, "trial-1")), schedules(a, filepath.Join(out, point, "trial-1"))
		if len(x) == 0 || len(x) != len(y) {
			a.Fatalf("%s: schedule files %v under fabric run, %v from the bundle", point, x, y)
		}
		for name, sum := range x {
			if y[name] != sum {
				a.Errorf("%s: %s differs between fabric run and the bundle", point, name)
			}
		}
		a.Logf("%s: %d schedule files byte-identical", point, len(x))
	}
	compareRows(a, runDirs[0], out)
}

// schedules are a trial directory's schedule files and their digests.
func schedules(t *testenv.Attempt, dir string) map[string]string {
	files, _ := filepath.Glob(filepath.Join(dir, "schedule-*.jsonl"))
	out := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatalf("%v", err)
		}
		sum := sha256.Sum256(b)
		out[filepath.Base(f)] = hex.EncodeToString(sum[:])
	}
	return out
}

// compareRows checks that the two runs' reports have the same rows and
// that each row's per-flow throughput agrees within four standard errors
// of the difference, each trial's from its own per-second throughput (the
// noise its throughput figure shows).
func compareRows(t *testenv.Attempt, runDir, bundleDir string) {
	load := func(dir string) map[string]*report.TrialSummary {
		trials, err := report.LoadRuns(dir)
		if err != nil {
			t.Fatalf("%v", err)
		}
		out := map[string]*report.TrialSummary{}
		for _, tr := range trials {
			out[tr.Scheme] = tr
		}
		return out
	}
	ran, bundled := load(runDir), load(bundleDir)
	if len(ran) != 2 || len(bundled) != len(ran) {
		t.Fatalf("rows: %d under fabric run, %d from bundles", len(ran), len(bundled))
	}
	t.Logf("%-6s %18s %18s %10s %10s", "scheme", "run Mbit/s/flow", "bundles Mbit/s/flow", "|diff|", "4 SE")
	for scheme, a := range ran {
		b := bundled[scheme]
		if b == nil || a.ThroughputMbp == nil || b.ThroughputMbp == nil {
			t.Fatalf("%s: no throughput row in both reports", scheme)
		}
		seA, seB := perSecondSE(t, a), perSecondSE(t, b)
		tol := 4 * math.Hypot(seA, seB)
		diff := math.Abs(a.ThroughputMbp.Mean - b.ThroughputMbp.Mean)
		t.Logf("%-6s %18.3f %18.3f %10.3f %10.3f", scheme, a.ThroughputMbp.Mean, b.ThroughputMbp.Mean, diff, tol)
		if diff > tol {
			t.Errorf("%s: per-flow throughput %.3f under fabric run, %.3f from its bundle: %.3f apart, beyond the trials' noise (%.3f)",
				scheme, a.ThroughputMbp.Mean, b.ThroughputMbp.Mean, diff, tol)
		}
	}
}

// perSecondSE is the standard error of a trial's mean per-flow
// throughput, from batch means of its samples over its flows: half a
// second each, since neighbouring samples of a flow's rate are not
// independent.
func perSecondSE(t *testenv.Attempt, tr *report.TrialSummary) float64 {
	var secs []float64
	for _, s := range tr.Throughput {
		for i, v := range s.Mbps {
			for len(secs) <= i {
				secs = append(secs, 0)
			}
			secs[i] += v / float64(len(tr.Throughput))
		}
	}
	const batch = 5 // samples of 100 ms
	var means []float64
	for i := 0; i+batch <= len(secs); i += batch {
		var m float64
		for _, v := range secs[i : i+batch] {
			m += v / batch
		}
		means = append(means, m)
	}
	if secs = means; len(secs) < 3 {
		t.Fatalf("%s: %d half-seconds of throughput, too few for its noise", tr.Scheme, len(secs))
	}
	var mean, ss float64
	for _, v := range secs {
		mean += v / float64(len(secs))
	}
	for _, v := range secs {
		ss += (v - mean) * (v - mean)
	}
	return math.Sqrt(ss/float64(len(secs)-1)) / math.Sqrt(float64(len(secs)))
}
