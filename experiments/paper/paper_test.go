package paper

import (
	"math"
	"strings"
	"testing"

	"fabric/results/report"
)

func rows(load float64, lat map[string]float64) []report.Row {
	var out []report.Row
	for s, v := range lat {
		out = append(out, report.Row{Scheme: s, Load: load, LatAvg: v, FCT10MBAvg: math.NaN()})
	}
	return out
}

// The ordering check passes exactly when every pair the paper ranks keeps
// its order, and ignores schemes the run did not measure.
func TestOrderingVerdict(t *testing.T) {
	good := rows(0.4, map[string]float64{"tcp-droptail": 1600, "dctcp-30k": 260, "dctcp-6k-pacer": 90, "dctcp-pq950-pacer": 40})
	bad := rows(0.4, map[string]float64{"tcp-droptail": 1600, "dctcp-30k": 260, "dctcp-6k-pacer": 90, "dctcp-pq950-pacer": 320})
	partial := rows(0.4, map[string]float64{"tcp-droptail": 1600, "dctcp-pq950-pacer": 30})
	for _, c := range []struct {
		name     string
		rows     []report.Row
		pass     bool
		compared int
	}{{"paper order", good, true, 4}, {"PQ above DCTCP", bad, false, 4}, {"two schemes", partial, true, 2}} {
		cmp, err := Compare("hull-table4", c.rows)
		if err != nil {
			t.Fatal(err)
		}
		if len(cmp.Rows) != 1 || cmp.Rows[0].Label != "40%" {
			t.Fatalf("%s: rows %+v", c.name, cmp.Rows)
		}
		r := cmp.Rows[0]
		if r.Pass != c.pass || r.Compared != c.compared {
			t.Errorf("%s: pass %v compared %d, want %v %d", c.name, r.Pass, r.Compared, c.pass, c.compared)
		}
		md := cmp.Markdown()
		verdict := map[bool]string{true: "PASS", false: "FAIL"}[c.pass]
		if !strings.Contains(md, "| 40% |") || !strings.Contains(md, verdict) || !strings.Contains(md, "329 / 1600") {
			t.Errorf("%s: markdown lacks the row, the paper/fabric cell or %s:\n%s", c.name, verdict, md)
		}
	}
	if _, err := Compare("hull-table9", nil); err == nil {
		t.Error("unknown table accepted")
	}
}

// HULL eq. 3 at γ = 0.95 less 8%: the slowdown grows with load.
func TestSlowdownTheory(t *testing.T) {
	prev := 1.0
	for _, rho := range []float64{0.2, 0.4, 0.6} {
		sd := Slowdown(rho, effectiveGamma)
		if sd <= prev {
			t.Errorf("slowdown at %v = %v, not above %v", rho, sd, prev)
		}
		prev = sd
	}
	if sd := Slowdown(0, 1); sd != 1 {
		t.Errorf("no headroom, no load: %v", sd)
	}
}
