package experiments

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fabric-emu/fabric/emu/emutest"
	"github.com/fabric-emu/fabric/internal/testenv"
)

// swp/fig1's quick variant runs end to end on a lab: both classes'
// messages complete, and the report judges each class's SLO in every row.
func TestQuickSWPFig1(t *testing.T) {
	testenv.RequireRoot(t)
	res := runQuick(t, "swp/fig1")
	for _, r := range res.Report.Rows {
		for _, class := range []string{"fg", "bg"} {
			c := r.Class(class)
			if len(c.SLO) != 1 || c.SLO[0].N == 0 {
				t.Errorf("%s: class %s has no SLO verdict (%+v)", r.Scheme, class, c)
				continue
			}
			t.Logf("%s %s: p99 slowdown below 1 BDP %.2f ± %.2f over %d trials: %s", r.Scheme, class,
				c.SLO[0].P99, c.SLO[0].P99CI, c.SLO[0].Trials, c.SLO[0].Verdict())
		}
	}
	// SWP Fig. 1's direction at 80 % background: strict priority protects
	// the foreground that FIFO leaves behind the background's bursts (the
	// quick run measured fg p99 2.43 against 15.9, 2.48 against 13.0).
	fg := map[string]float64{}
	for _, r := range res.Report.Rows {
		if c := r.Class("fg"); len(c.SLO) == 1 && c.SLO[0].N > 0 {
			fg[r.Scheme] = c.SLO[0].P99
		}
	}
	if prio, fifo := fg["dctcp-prio"], fg["dctcp-fifo"]; !(prio > 0 && fifo > prio) {
		t.Errorf("foreground p99 slowdown: strict priority %.2f, FIFO %.2f; want priority below FIFO", prio, fifo)
	}
	if _, rest, ok := strings.Cut(res.Report.Markdown, "## Traffic classes"); ok {
		section, _, _ := strings.Cut(rest, "\n## ")
		t.Logf("report:\n## Traffic classes%s", section)
	} else {
		t.Errorf("the report has no traffic-class section:\n%s", res.Report.Markdown)
	}
}

// swp/capacity's quick variant runs its search end to end on its weighted
// scheme (the quick variant's other, FIFO, needs nothing the weights do
// not): its probes run and are judged, search.json records them, and the
// report ends with the capacity table. The quick bracket is too coarse
// for an answer worth checking (TestSearchFindsAKnownCapacity checks one).
func TestQuickSWPCapacity(t *testing.T) {
	testenv.RequireRoot(t)
	spec, err := Builtin("swp/capacity")
	if err != nil {
		t.Fatal(err)
	}
	spec = spec.WithQuick()
	spec.Sweep.Scheme = SchemeList{"dctcp-weights"}
	prefix := emutest.Prefix(t, "t7c")
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	t0 := time.Now()
	res, err := Search(ctx, spec, Options{Out: t.TempDir(), LabPrefix: prefix, Seed: 1, Progress: &progress})
	t.Logf("swp/capacity quick: %v\n%s", time.Since(t0).Round(time.Second), progress.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Schemes) != 1 {
		t.Fatalf("%d schemes searched, want 1", len(res.Schemes))
	}
	for _, s := range res.Schemes {
		if len(s.Steps) < 2 || s.Trials != len(s.Steps)*spec.Trials {
			t.Errorf("%s: %d probes, %d trials; want at least 2 probes of %d trial(s)", s.Scheme, len(s.Steps), s.Trials, spec.Trials)
		}
	}
	if _, err := os.Stat(filepath.Join(res.Dir, searchFileName)); err != nil {
		t.Error(err)
	}
	_, section, ok := strings.Cut(res.Report.Markdown, "## Capacity search")
	if !ok {
		t.Fatalf("the report has no capacity section:\n%s", res.Report.Markdown)
	}
	t.Logf("## Capacity search%s", section)
}
