// Package stats computes exact order statistics on a full sample and exports
// empirical CDFs as CSV.
//
// Percentiles use the nearest-rank method: the p-th percentile of N sorted
// values v[1..N] is v[ceil(p/100·N)], and v[1] for p = 0. It always returns
// an observed value (no interpolation), so a p99 of 120 µs means some packet
// really took 120 µs, and at least 99% of packets took no longer.
package stats

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
)

// Percentile returns the nearest-rank p-th percentile (0 ≤ p ≤ 100) of
// sorted, which must be sorted ascending. It returns NaN for an empty sample.
func Percentile(sorted []float64, p float64) float64 {
	n := len(sorted)
	if n == 0 || math.IsNaN(p) {
		return math.NaN()
	}
	switch {
	case p <= 0:
		return sorted[0]
	case p >= 100:
		return sorted[n-1]
	}
	// p·N/100 is inexact in binary (99.9·1000/100 = 999.0000000000001), and a
	// plain ceil would then skip a rank. A relative tolerance far below one
	// rank absorbs the rounding error.
	x := p * float64(n) / 100
	rank := int(math.Ceil(x - x*1e-12))
	if rank < 1 {
		rank = 1
	}
	return sorted[rank-1]
}

// Mean returns the arithmetic mean, NaN for an empty sample. It sums with
// Kahan compensation so that millions of nanosecond values stay exact enough.
func Mean(values []float64) float64 {
	if len(values) == 0 {
		return math.NaN()
	}
	var sum, c float64
	for _, v := range values {
		y := v - c
		t := sum + y
		c = (t - sum) - y
		sum = t
	}
	return sum / float64(len(values))
}

// Summary is the set of statistics every fabric table reports.
type Summary struct {
	N    int     `json:"n"`
	Mean float64 `json:"mean"`
	Min  float64 `json:"min"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p999"`
	Max  float64 `json:"max"`
}

// Summarize sorts values in place and returns their summary.
func Summarize(values []float64) Summary {
	slices.Sort(values)
	return SummarizeSorted(values)
}

// SummarizeSorted summarizes an ascending sample.
func SummarizeSorted(sorted []float64) Summary {
	if len(sorted) == 0 {
		nan := math.NaN()
		return Summary{Mean: nan, Min: nan, P50: nan, P90: nan, P99: nan, P999: nan, Max: nan}
	}
	return Summary{
		N:    len(sorted),
		Mean: Mean(sorted),
		Min:  sorted[0],
		P50:  Percentile(sorted, 50),
		P90:  Percentile(sorted, 90),
		P99:  Percentile(sorted, 99),
		P999: Percentile(sorted, 99.9),
		Max:  sorted[len(sorted)-1],
	}
}

// Scale returns s with every value statistic multiplied by f (for unit
// conversion, e.g. ns → µs).
func (s Summary) Scale(f float64) Summary {
	s.Mean *= f
	s.Min *= f
	s.P50 *= f
	s.P90 *= f
	s.P99 *= f
	s.P999 *= f
	s.Max *= f
	return s
}

// Point is one step of an empirical CDF: the fraction of the sample that is
// ≤ Value.
type Point struct {
	Value    float64
	Fraction float64
}

// CDF returns the empirical CDF of an ascending sample: one point per
// distinct value, at the last occurrence of that value, so Fraction is
// exactly P(X ≤ Value). If maxPoints > 0 and there are more distinct values,
// the CDF is thinned to about maxPoints points spread evenly in rank; the
// minimum and maximum are always kept. Thinning only drops steps; it never
// moves one, so every kept point is still exact.
func CDF(sorted []float64, maxPoints int) []Point {
	n := len(sorted)
	if n == 0 {
		return nil
	}
	var pts []Point
	for i := 0; i < n; i++ {
		if i+1 < n && sorted[i+1] == sorted[i] {
			continue
		}
		pts = append(pts, Point{Value: sorted[i], Fraction: float64(i+1) / float64(n)})
	}
	if maxPoints <= 0 || len(pts) <= maxPoints {
		return pts
	}
	thin := make([]Point, 0, maxPoints+2)
	thin = append(thin, Point{Value: sorted[0], Fraction: pts[0].Fraction})
	step := float64(len(pts)) / float64(maxPoints)
	last := 0
	for k := 1; k < maxPoints; k++ {
		i := int(float64(k) * step)
		if i > last && i < len(pts)-1 {
			thin = append(thin, pts[i])
			last = i
		}
	}
	return append(thin, pts[len(pts)-1])
}

// WriteCDF writes points as CSV with the header "<valueName>,fraction".
// Values are printed with the shortest exact representation.
func WriteCDF(w io.Writer, valueName string, points []Point) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "%s,fraction\n", valueName)
	var buf []byte
	for _, p := range points {
		buf = strconv.AppendFloat(buf[:0], p.Value, 'g', -1, 64)
		buf = append(buf, ',')
		buf = strconv.AppendFloat(buf, p.Fraction, 'g', -1, 64)
		buf = append(buf, '\n')
		bw.Write(buf)
	}
	return bw.Flush()
}
