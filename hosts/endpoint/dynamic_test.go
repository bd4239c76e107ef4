package endpoint

import (
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	"fabric/internal/records"
	"fabric/internal/testenv"
)

// TestDynamicOfferedLoad is the accuracy check: the dynamic
// pattern at 40% of a 100 Mbit link for 20 s achieves a mean receive
// throughput within ±5% of 40 Mbit/s, with Poisson arrivals (inter-arrival
// coefficient of variation 0.9–1.1).
//
// The sizes come from a narrow workload (uniform 5–15 KB, ~10,000
// requests), so the test judges the generator rather than luck: with a
// heavy-tailed workload the bytes drawn in 20 s scatter far more than 5%
// (hull_1k_10m draws ~50 requests in 20 s at this load; one 10 MB request
// more or less is 10% of the target). TestDynamicHULLWorkload runs the
// paper's workload and checks delivery against what was drawn.
//
// Arrival times are the real send times, so a machine too busy to wake the
// generator on time bunches them. The engine reports how late it was; a
// trial in which more than 1% of requests left over 1 ms late is flagged
// as starved and run once more, and the last trial is judged either way.
func TestDynamicOfferedLoad(t *testing.T) {
	testenv.RequireRoot(t)
	lab := upLab(t, "name: "+labName("dyn")+"\ntopology: {kind: star, hosts: 4}\nlinks: {rate: 100Mbit}\n")
	cdf := filepath.Join(t.TempDir(), "uniform_5k_15k.cdf")
	if err := os.WriteFile(cdf, []byte("# discrete: false\n5000 0\n15000 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const duration = 20 * time.Second
	var (
		run       string
		clientLog string
	)
	for trial := 1; trial <= 2; trial++ {
		run = t.TempDir()
		var servers []*proc
		for _, h := range []string{"h1", "h2", "h3"} {
			servers = append(servers, start(t, lab, h, "server", "--host", h, "--run-dir", run))
		}
		args := append([]string{"dynamic", "--host", "h0", "--run-dir", run, "--seed", strconv.Itoa(trial),
			"--workload", cdf, "--load", "0.4", "--link-rate", "100Mbit", "--duration", duration.String()},
			peersArgs(lab, "h1", "h2", "h3")...)
		client := start(t, lab, "h0", args...)
		client.wait(duration + 30*time.Second)
		for _, s := range servers {
			s.stop()
		}
		clientLog = client.logText()
		t.Logf("trial %d client log:\n%s", trial, clientLog)
		if late := logValue(clientLog, "late_over_1ms_pct"); late <= 1 {
			break
		} else if trial == 1 {
			t.Logf("trial 1: %.1f%% of requests left over 1 ms late: the CPU was starved; running again", late)
		}
	}

	set := readRecords(t, run)
	var bytes int64
	for _, f := range set.Flows {
		if f.Pattern != "dynamic" || f.Dst != "h0" || f.Bytes != f.Size || f.EndNS <= f.StartNS ||
			!slices.Contains([]string{"h1", "h2", "h3"}, f.Src) {
			t.Fatalf("bad flow record %+v", f)
		}
		bytes += f.Bytes
	}
	if len(set.Flows) < 5000 {
		t.Fatalf("only %d flows recorded", len(set.Flows))
	}
	target := 0.4 * 100e6
	achieved := float64(bytes) * 8 / duration.Seconds()
	t.Logf("requests %d, achieved %.2f Mbit/s vs target %.2f Mbit/s (%+.2f%%)", len(set.Flows), achieved/1e6, target/1e6, (achieved/target-1)*100)
	if math.Abs(achieved/target-1) > 0.05 {
		t.Errorf("achieved %.2f Mbit/s, want 40 Mbit/s ± 5%%", achieved/1e6)
	}
	cov := interArrivalCoV(set.Flows)
	t.Logf("inter-arrival coefficient of variation %.3f", cov)
	if cov < 0.9 || cov > 1.1 {
		t.Errorf("inter-arrival CoV %.3f, want 0.9–1.1 for Poisson arrivals", cov)
	}
	t.Logf("sample records:\n%s", sampleLines(t, run, records.FileName("h0.dynamic"), 3))
}

// logValue reads a numeric key=value from the engine's text log.
func logValue(log, key string) float64 {
	m := regexp.MustCompile(`\b` + key + `=([0-9.e+-]+)`).FindStringSubmatch(log)
	if m == nil {
		return math.NaN()
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

// interArrivalCoV is the coefficient of variation of the gaps between
// consecutive request send times; 1 for a Poisson process.
func interArrivalCoV(flows []records.Flow) float64 {
	starts := make([]int64, len(flows))
	for i, f := range flows {
		starts[i] = f.StartNS
	}
	slices.Sort(starts)
	var sum, sq float64
	n := float64(len(starts) - 1)
	for i := 1; i < len(starts); i++ {
		g := float64(starts[i] - starts[i-1])
		sum += g
		sq += g * g
	}
	mean := sum / n
	return math.Sqrt(sq/n-mean*mean) / mean
}

// TestDynamicHULLWorkload runs HULL §6.2's workload (80% 1 KB, 20% 10 MB)
// at 40% of 100 Mbit for 20 s with the paper's 16 connections per server.
// About 50 requests fit in 20 s, so the load actually drawn scatters by
// ±30% around the target; the test checks that every drawn byte arrived
// and reports drawn and achieved load against the target.
func TestDynamicHULLWorkload(t *testing.T) {
	testenv.RequireRoot(t)
	lab := upLab(t, "name: "+labName("hull")+"\ntopology: {kind: star, hosts: 4}\nlinks: {rate: 100Mbit}\n")
	run := t.TempDir()
	const duration = 20 * time.Second
	var servers []*proc
	for _, h := range []string{"h1", "h2", "h3"} {
		servers = append(servers, start(t, lab, h, "server", "--host", h, "--run-dir", run))
	}
	client := start(t, lab, "h0", append([]string{"dynamic", "--host", "h0", "--run-dir", run, "--seed", "1",
		"--workload", "hull_1k_10m", "--load", "0.4", "--link-rate", "100Mbit", "--duration", duration.String(),
		"--drain", "30s", "--dscp-below", "10KB=CS7"}, peersArgs(lab, "h1", "h2", "h3")...)...)
	client.wait(duration + 60*time.Second)
	for _, s := range servers {
		s.stop()
	}
	log := client.logText()
	t.Logf("client log:\n%s", log)
	set := readRecords(t, run)
	var bytes int64
	var small, large []float64
	for _, f := range set.Flows {
		bytes += f.Bytes
		fct := float64(f.EndNS-f.StartNS) / 1e6
		switch {
		case f.Size == 1000 && f.DSCP == 56:
			small = append(small, fct)
		case f.Size == 10_000_000 && f.DSCP == 0:
			large = append(large, fct)
		default:
			t.Fatalf("flow outside the HULL workload or its class: %+v", f)
		}
	}
	if sent := logValue(log, "requests"); float64(len(set.Flows)) != sent || logValue(log, "unfinished") != 0 {
		t.Fatalf("%d flows recorded, %v requests sent", len(set.Flows), sent)
	}
	slices.Sort(small)
	slices.Sort(large)
	achieved := float64(bytes) * 8 / duration.Seconds() / 1e6
	t.Logf("HULL workload: %d requests (%d × 1 KB, %d × 10 MB); drawn = achieved = %.1f Mbit/s vs target 40 Mbit/s (%+.0f%%)",
		len(set.Flows), len(small), len(large), achieved, (achieved/40-1)*100)
	if len(small) > 0 && len(large) > 0 {
		t.Logf("median FCT: 1 KB %.2f ms, 10 MB %.0f ms", small[len(small)/2], large[len(large)/2])
	}
	if len(large) == 0 || len(small) < 4*len(large)/2 {
		t.Errorf("implausible mix for 80%% 1 KB / 20%% 10 MB: %d small, %d large", len(small), len(large))
	}
}
