package paper

import (
	"math"
	"strings"
	"testing"

	"github.com/fabric-emu/fabric/results/report"
)

func rows(load float64, lat map[string]float64) []report.Row {
	var out []report.Row
	for s, v := range lat {
		out = append(out, report.Row{Scheme: s, Load: load, LatAvg: v, ProbeAvg: math.NaN(), ProbeP99: math.NaN(), FCT10MBAvg: math.NaN()})
	}
	return out
}

// HULL's latency tables take the probe stream's statistic, which is what
// the paper's LMM timed, and every packet's only in a run without probes.
func TestHULLTablesTakeTheProbes(t *testing.T) {
	withProbe := rows(0.4, map[string]float64{"tcp-droptail": 1600, "dctcp-30k": 260})
	for i := range withProbe {
		withProbe[i].ProbeAvg = withProbe[i].LatAvg * 0.4
	}
	cmp, err := Compare("hull-table4", withProbe, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := cmp.Rows[0].Measured[:2]; got[0] != 640 || got[1] != 104 {
		t.Errorf("measured %v, want the probes' 640 and 104", got)
	}
	cmp, err = Compare("hull-table4", rows(0.4, map[string]float64{"tcp-droptail": 1600, "dctcp-30k": 260}), 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := cmp.Rows[0].Measured[:2]; got[0] != 1600 || got[1] != 260 {
		t.Errorf("measured %v without probes, want every packet's 1600 and 260", got)
	}
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
		cmp, err := Compare("hull-table4", c.rows, 0)
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
	if _, err := Compare("hull-table9", nil, 0); err == nil {
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

// Table 5's rows pick the large- or small-buffer scheme and the metric the
// row names.
func TestTable5Rows(t *testing.T) {
	nan := math.NaN()
	rows := []report.Row{
		{Scheme: "tcp-qos-small", LatAvg: 50, FCT1KBAvg: 3000, FCT10MBAvg: 3000},
		{Scheme: "pq950-small", LatAvg: 40, FCT1KBAvg: 3100, FCT10MBAvg: 2000},
		{Scheme: "tcp-qos-large", LatAvg: nan, FCT1KBAvg: nan, FCT10MBAvg: nan},
	}
	cmp, err := Compare("hull-table5", rows, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]CompRow{}
	for _, r := range cmp.Rows {
		got[r.Label] = r
	}
	if len(got) != 3 {
		t.Fatalf("rows %v, want the 3 small-buffer rows (large buffer unmeasured)", cmp.Rows)
	}
	r := got["small buffer: 10MB FCT avg"]
	if r.Measured[0] != 3000 || r.Measured[1] != 2000 || !r.Pass {
		t.Errorf("10MB row: %+v", r)
	}
	if r := got["small buffer: 1KB FCT avg"]; !r.Pass { // paper 371 < 378, fabric 3000 < 3100
		t.Errorf("1KB row: %+v", r)
	}
}

// Table 4's comparison states the load each row's port carried, the mean
// over its schemes, and eq. 3 at it beside eq. 3 at the load asked for.
func TestTable4StatesTheCarriedLoad(t *testing.T) {
	in := rows(0.6, map[string]float64{"tcp-droptail": 600, "dctcp-30k": 90, "dctcp-6k-pacer": 19, "dctcp-pq950-pacer": 5})
	for i := range in {
		in[i].Carried = 0.49 + 0.01*float64(i%3) // 0.49, 0.50, 0.51, 0.49: mean 0.4975
		in[i].FCT10MBAvg = 100
		if in[i].Scheme == "dctcp-pq950-pacer" {
			in[i].FCT10MBAvg = 140
		}
	}
	var sum float64
	for _, r := range in {
		sum += r.Carried
	}
	want := sum / float64(len(in))
	cmp, err := Compare("hull-table4", in, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := cmp.Rows[0].Carried; math.Abs(got-want) > 1e-12 {
		t.Errorf("row carried %.4f, want the schemes' mean %.4f", got, want)
	}
	sd := cmp.Slowdown[0]
	if math.Abs(sd.Carried-want) > 1e-12 || math.Abs(sd.CarriedTheory-Slowdown(want, effectiveGamma)) > 1e-12 || sd.CarriedTheory >= sd.Theory {
		t.Errorf("slowdown row %+v: want eq. 3 at the carried %.4f, below eq. 3 at 0.6", sd, want)
	}
	md := cmp.Markdown()
	if !strings.Contains(md, "| 60% | 50% | 720 / 600 (600) |") || !strings.Contains(md, "| 60% | 1.55 | 1.46 | 1.40 | 50% | 1.33 |") {
		t.Errorf("markdown lacks the carried load in the side-by-side or the slowdown table:\n%s", md)
	}
	unknown, err := Compare("hull-table4", rows(0.6, map[string]float64{"tcp-droptail": 600, "dctcp-30k": 90}), 0)
	if err != nil {
		t.Fatal(err)
	}
	if md := unknown.Markdown(); strings.Contains(md, "carried") {
		t.Errorf("a run that knows no carried load shows the column:\n%s", md)
	}
}
