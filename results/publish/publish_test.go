package publish

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// syntheticRun writes a run directory with one of every kind of file a
// run has: light ones, a per-packet CSV over the limit, and kinds publish
// never copies.
func syntheticRun(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "runs", "demo", "20990101T000000Z")
	files := map[string]string{
		"run.json": `{"name": "demo", "file": "demo.yaml", "quick": true, "seed": 7,
			"started": "2099-01-01T00:00:00Z", "fabric": {"commit": "0123456789abcdef0123", "modified": true},
			"kernel": "6.1.0-test", "machine": {"cpus": 2, "model": "Test CPU", "memory_mb": 4096, "virtual": true}}`,
		"summary.csv":                        "scheme,trial\nfifo,1\n",
		"report.md":                          "# fabric report\n\n## Latency\n\n| a |\n|---|\n| 1 |\n\n## Figures\n\n- [cdf](latency-cdf.png)\n",
		"latency-cdf.png":                    "png",
		"latency-cdf.svg":                    "svg",
		"fifo/trial-1/meta.json":             `{"scheme": "fifo", "fidelity": {"cpu_steal_pct": 0.5}}`,
		"fifo/trial-1/fidelity.json":         `{}`,
		"fifo/trial-1/records-h0.jsonl":      "{}\n",
		"fifo/trial-1/schedule-h0.jsonl":     "{}\n",
		"fifo/trial-1/COMPLETE":              "ok\n",
		"fifo/trial-1/lmm/s0.summary.json":   `{}`,
		"fifo/trial-1/captures/s0.pcap":      "pcap",
		"fifo/trial-1/logs/h0.transport.log": "log",
		"fifo/trial-2/meta.json":             `{"scheme": "fifo", "fidelity": {"cpu_steal_pct": 2.5, "cpu_saturated": true}}`,
		"set-aside/fifo/trial-2.1/meta.json": `{"scheme": "fifo"}`,
	}
	for name, body := range files {
		writeFile(t, filepath.Join(dir, name), body)
	}
	big := filepath.Join(dir, "fifo/trial-1/lmm/s0.packets.csv")
	writeFile(t, big, "")
	if err := os.Truncate(big, MaxFileSize+1); err != nil {
		t.Fatal(err)
	}
	// A long trial's meta.json (its CPU series) passes the limit too, and
	// is copied all the same: the page counts trials by it.
	meta := filepath.Join(dir, "fifo/trial-2/meta.json")
	body := `{"scheme": "fifo", "fidelity": {"cpu_steal_pct": 2.5, "cpu_saturated": true}, "pad": "` + strings.Repeat("x", MaxFileSize) + `"}`
	writeFile(t, meta, body)
	return dir
}

func writeFile(t *testing.T, path, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// pageWith reads the page docs/results/name.md and fails the test for each
// of want it lacks.
func pageWith(t *testing.T, docs, name string, want ...string) string {
	t.Helper()
	page, err := os.ReadFile(filepath.Join(docs, "results", name+".md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range want {
		if !strings.Contains(string(page), w) {
			t.Errorf("page lacks %q:\n%s", w, page)
		}
	}
	return string(page)
}

func tree(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(root, p)
			out = append(out, filepath.ToSlash(rel))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// TestPublish publishes a synthetic run: the light files are copied and
// nothing else, the page says where its numbers come from, and publishing
// again replaces the copy.
func TestPublish(t *testing.T) {
	run := syntheticRun(t)
	docs := filepath.Join(t.TempDir(), "docs")
	res, err := Publish(run, docs, "demo")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"fifo/trial-1/COMPLETE", "fifo/trial-1/fidelity.json", "fifo/trial-1/lmm/s0.summary.json",
		"fifo/trial-1/meta.json", "fifo/trial-1/records-h0.jsonl", "fifo/trial-2/meta.json",
		"latency-cdf.png", "published.json", "report.md", "run.json", "summary.csv",
	}
	if got := tree(t, res.Dir); !slices.Equal(got, want) {
		t.Errorf("published files:\n%q\nwant\n%q", got, want)
	}
	if res.Copied != len(want)-1 || len(res.LeftOut) != 1 || res.LeftOut[0].Path != "fifo/trial-1/lmm/s0.packets.csv" {
		t.Errorf("copied %d, left out %+v; want %d and the packets CSV", res.Copied, res.LeftOut, len(want)-1)
	}
	page := pageWith(t, docs, "demo",
		"## 2099-01-01 00:00 UTC",
		"| experiment | `demo` (`demo.yaml`, quick variant), seed 7 |",
		"| commit | `0123456789ab` with uncommitted changes |",
		"| machine | 2 CPUs (Test CPU, virtual), 4.0 GiB; kernel 6.1.0-test |",
		"| steal | the hypervisor took 0.5–2.5 % of the CPU per trial (mean 1.5 %) |",
		"| trials | 2, 1 flagged unfaithful |",
		"[demo/20990101T000000Z/](demo/20990101T000000Z/)",
		"`fifo/trial-1/lmm/s0.packets.csv` (256KB)",
		"![latency-cdf](demo/20990101T000000Z/latency-cdf.png)",
		"#### Latency", // the report's headings, two levels down
		"- [cdf](demo/20990101T000000Z/latency-cdf.png)", // its links into the artifacts
	)
	if strings.Contains(page, "# fabric report") {
		t.Errorf("page repeats the report's title:\n%s", page)
	}

	// Again, after the run lost a file: the copy is replaced, not merged.
	os.Remove(filepath.Join(run, "summary.csv"))
	if _, err := Publish(run, docs, "demo"); err != nil {
		t.Fatal(err)
	}
	if got := tree(t, res.Dir); slices.Contains(got, "summary.csv") {
		t.Errorf("republished copy still has summary.csv: %q", got)
	}
	if entries, _ := os.ReadDir(filepath.Join(docs, "results", "demo")); len(entries) != 1 {
		t.Errorf("docs/results/demo holds %d entries, want the one run (no temporary left)", len(entries))
	}
}

// A validation run's checks (checks.json, as fabric validate writes it)
// are copied and shown on its page as a table, with the mechanism named
// for a check that did not pass; a run without the file has no table, and
// one whose file cannot be read is not published as if it had none.
func TestPublishShowsAValidationRunsChecks(t *testing.T) {
	run := syntheticRun(t)
	writeFile(t, filepath.Join(run, "checks.json"), `{"checked_by": "(devel)+0123456789ab", "rows": [
		{"name": "M/D/1 mean wait, ρ = 0.9", "theory": "5450 µs", "measured": "5644 µs", "error": "+3.6 % (±10 %)", "verdict": "PASS"},
		{"name": "DCTCP amplitude, N = 8", "theory": "13.8 pkts", "measured": "18.0 pkts", "error": "+30.4 % (±25 %)", "verdict": "FAIL",
		 "cause": "the windows drop by more than DCTCP's α/2"}]}`)
	docs := filepath.Join(t.TempDir(), "docs")
	res, err := Publish(run, docs, "demo")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(tree(t, res.Dir), "checks.json") {
		t.Errorf("checks.json not copied: %q", tree(t, res.Dir))
	}
	page := pageWith(t, docs, "demo",
		"### Checks against theory",
		"1 of 2 checks pass (checked by fabric `(devel)+0123456789ab`)",
		"| M/D/1 mean wait, ρ = 0.9 | 5450 µs | 5644 µs | +3.6 % (±10 %) | PASS |",
		"- FAIL DCTCP amplitude, N = 8: the windows drop by more than DCTCP's α/2")
	if i, j := strings.Index(page, "### Checks against theory"), strings.Index(page, "### The run's report"); i < 0 || j < i {
		t.Errorf("the checks do not come before the report:\n%s", page)
	}

	plain := syntheticRun(t)
	if _, err := Publish(plain, docs, "plain"); err != nil {
		t.Fatal(err)
	}
	if page := pageWith(t, docs, "plain"); strings.Contains(page, "Checks against theory") {
		t.Errorf("a run without checks.json has a checks table:\n%s", page)
	}
	writeFile(t, filepath.Join(plain, "checks.json"), `{"rows": [`)
	if _, err := Publish(plain, docs, "broken"); err == nil {
		t.Error("a run whose checks.json does not parse was published")
	}
	if _, err := os.Stat(filepath.Join(docs, "results", "broken")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the failed publish left docs/results/broken behind (%v)", err)
	}
}

// TestPublishBadInput leaves nothing behind for a bad name or a directory
// that is not a run.
func TestPublishBadInput(t *testing.T) {
	docs := filepath.Join(t.TempDir(), "docs")
	if _, err := Publish(syntheticRun(t), docs, "Bad Name"); err == nil {
		t.Error("a name with capitals and a space was accepted")
	}
	if _, err := Publish(t.TempDir(), docs, "demo"); err == nil {
		t.Error("a directory without run.json was accepted")
	}
	if _, err := os.Stat(docs); !os.IsNotExist(err) {
		t.Errorf("docs exists after bad input: %v", err)
	}
}

// TestPublishUndo: when the page cannot be written (here a broken run
// published before), the new copy is removed again.
func TestPublishUndo(t *testing.T) {
	docs := filepath.Join(t.TempDir(), "docs")
	writeFile(t, filepath.Join(docs, "results", "demo", "broken", "run.json"), "{")
	run := syntheticRun(t)
	if _, err := Publish(run, docs, "demo"); err == nil {
		t.Fatal("publish succeeded beside a broken run")
	}
	entries, err := os.ReadDir(filepath.Join(docs, "results", "demo"))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "broken" {
		t.Errorf("docs/results/demo holds %v, want only the broken run", entries)
	}
	if _, err := os.Stat(filepath.Join(docs, "results", "demo.md")); !os.IsNotExist(err) {
		t.Errorf("a page was written: %v", err)
	}
}
