package stats

import (
	"bytes"
	"math"
	"testing"
)

// The cases are worked by hand with the nearest-rank rule rank = ceil(p·N/100).
func TestPercentileNearestRank(t *testing.T) {
	// N = 5: 1 2 3 4 5
	five := []float64{1, 2, 3, 4, 5}
	// N = 10: 10 20 ... 100
	ten := []float64{10, 20, 30, 40, 50, 60, 70, 80, 90, 100}
	// N = 1000: 1..1000
	thousand := make([]float64, 1000)
	for i := range thousand {
		thousand[i] = float64(i + 1)
	}
	cases := []struct {
		name   string
		sorted []float64
		p      float64
		want   float64
	}{
		{"p0 is min", five, 0, 1},
		{"p20 of 5: rank ceil(1)=1", five, 20, 1},
		{"p21 of 5: rank ceil(1.05)=2", five, 21, 2},
		{"p50 of 5: rank ceil(2.5)=3", five, 50, 3},
		{"p100 of 5 is max", five, 100, 5},
		{"p50 of 10: rank 5", ten, 50, 50},
		{"p90 of 10: rank 9", ten, 90, 90},
		{"p99 of 10: rank ceil(9.9)=10", ten, 99, 100},
		{"p25 of 10: rank ceil(2.5)=3", ten, 25, 30},
		{"p99 of 1000: rank 990", thousand, 99, 990},
		{"p99.9 of 1000: rank 999 exactly", thousand, 99.9, 999},
		{"p99.99 of 1000: rank ceil(999.9)=1000", thousand, 99.99, 1000},
		{"single value", []float64{7}, 99, 7},
	}
	for _, c := range cases {
		if got := Percentile(c.sorted, c.p); got != c.want {
			t.Errorf("%s: Percentile(p=%v) = %v, want %v", c.name, c.p, got, c.want)
		}
	}
	if !math.IsNaN(Percentile(nil, 50)) {
		t.Error("empty sample must give NaN")
	}
}

func TestSummarize(t *testing.T) {
	// Unsorted on purpose: Summarize sorts.
	v := []float64{5, 1, 4, 2, 3, 100, 6, 7, 8, 9}
	s := Summarize(v)
	// Sum = 145, N = 10.
	want := Summary{N: 10, Mean: 14.5, Min: 1, P50: 5, P90: 9, P99: 100, P999: 100, Max: 100}
	if s != want {
		t.Fatalf("Summarize = %+v, want %+v", s, want)
	}
	if got := s.Scale(1e-3).Mean; math.Abs(got-0.0145) > 1e-15 {
		t.Fatalf("Scale: mean %v", got)
	}
	if e := Summarize(nil); e.N != 0 || !math.IsNaN(e.Mean) {
		t.Fatalf("empty summary = %+v", e)
	}
}

func TestMeanKahan(t *testing.T) {
	// 1e16 + many 1s: naive summation loses every 1.
	v := []float64{1e16}
	for i := 0; i < 1000; i++ {
		v = append(v, 1)
	}
	got := Mean(v)
	want := (1e16 + 1000) / 1001
	if math.Abs(got-want)/want > 1e-15 {
		t.Fatalf("Mean = %v, want %v", got, want)
	}
}

func TestCDFSteps(t *testing.T) {
	// 1 1 2 3 3 3: P(X≤1)=2/6, P(X≤2)=3/6, P(X≤3)=6/6.
	pts := CDF([]float64{1, 1, 2, 3, 3, 3}, 0)
	want := []Point{{1, 2.0 / 6}, {2, 3.0 / 6}, {3, 1}}
	if len(pts) != len(want) {
		t.Fatalf("CDF = %v, want %v", pts, want)
	}
	for i := range want {
		if pts[i] != want[i] {
			t.Fatalf("CDF[%d] = %v, want %v", i, pts[i], want[i])
		}
	}
	var buf bytes.Buffer
	if err := WriteCDF(&buf, "latency_us", pts); err != nil {
		t.Fatal(err)
	}
	wantCSV := "latency_us,fraction\n1,0.3333333333333333\n2,0.5\n3,1\n"
	if buf.String() != wantCSV {
		t.Fatalf("CSV =\n%s\nwant\n%s", buf.String(), wantCSV)
	}
}

func TestCDFThinningKeepsExactEnds(t *testing.T) {
	v := make([]float64, 10000)
	for i := range v {
		v[i] = float64(i)
	}
	pts := CDF(v, 100)
	if len(pts) > 102 || len(pts) < 90 {
		t.Fatalf("thinned to %d points, want about 100", len(pts))
	}
	if pts[0] != (Point{0, 1e-4}) || pts[len(pts)-1] != (Point{9999, 1}) {
		t.Fatalf("ends %v %v", pts[0], pts[len(pts)-1])
	}
	for i, p := range pts {
		// Every kept point is an exact step: value k has fraction (k+1)/N.
		if p.Fraction != (p.Value+1)/10000 {
			t.Fatalf("point %d = %v is not an exact step", i, p)
		}
		if i > 0 && p.Value <= pts[i-1].Value {
			t.Fatalf("points not increasing at %d", i)
		}
	}
}

// The 95 % interval of 1, 2, 3: mean 2, s = 1, t(2) = 4.303, so
// 4.303/√3 = 2.484; one value has no interval.
func TestMeanCI95(t *testing.T) {
	m, h := MeanCI95([]float64{1, 2, 3})
	if m != 2 || math.Abs(h-4.303/math.Sqrt(3)) > 1e-12 {
		t.Errorf("MeanCI95(1,2,3) = %v ± %v", m, h)
	}
	if m, h := MeanCI95([]float64{5}); m != 5 || !math.IsNaN(h) {
		t.Errorf("MeanCI95(5) = %v ± %v, want 5 ± NaN", m, h)
	}
}
