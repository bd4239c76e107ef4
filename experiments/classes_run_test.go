package experiments

import (
	"strings"
	"testing"

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
	// quick run measured fg p99 2.55 against 20.2).
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
