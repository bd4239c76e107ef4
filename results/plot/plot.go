// Package plot draws fabric's figures with gonum/plot, each as a PNG and an
// SVG: CDFs overlaid per scheme, latency against load, and throughput time
// series. Every axis carries its unit.
package plot

import (
	"errors"
	"fmt"
	"image/color"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"fabric/results/stats"
)

// Size of every figure: wide enough for a legend of four schemes.
const (
	width  = 6 * vg.Inch
	height = 4 * vg.Inch
)

// Curve is one labelled CDF.
type Curve struct {
	Label  string
	Points []stats.Point
}

// Series is one labelled line of (X, Y) points.
type Series struct {
	Label string
	X, Y  []float64
}

// Figure describes the axes of a plot.
type Figure struct {
	Title  string
	XLabel string // with unit, e.g. "switch latency (µs)"
	YLabel string
	LogX   bool // for latencies spanning decades: queueing makes µs and ms both matter
	LogY   bool
	// legendLowerRight puts the legend where a CDF has no curve.
	legendLowerRight bool
	yRange           *[2]float64
}

// WantsLogX reports whether values spanning [lo, hi] read better on a log
// axis: more than about one and a half decades.
func WantsLogX(lo, hi float64) bool { return lo > 0 && hi/lo > 30 }

// CDF draws the curves as overlaid CDFs (y = fraction ≤ x) and writes
// base.png and base.svg. Log-x drops non-positive values, which a log axis
// cannot show, and says so in the legend.
func CDF(base string, fig Figure, curves []Curve) error {
	var series []Series
	for _, c := range curves {
		s := Series{Label: c.Label}
		if len(c.Points) > 0 {
			// Start the curve at 0 so the first step (often a large share
			// of packets at the floor latency) is drawn.
			s.X = append(s.X, c.Points[0].Value)
			s.Y = append(s.Y, 0)
		}
		for _, p := range c.Points {
			s.X = append(s.X, p.Value)
			s.Y = append(s.Y, p.Fraction)
		}
		series = append(series, s)
	}
	if fig.YLabel == "" {
		fig.YLabel = "fraction ≤ x (CDF)"
	}
	fig.legendLowerRight = true
	fig.yRange = &[2]float64{0, 1}
	return Lines(base, fig, series, false)
}

// Lines draws the series as lines (with point markers if markers is set,
// for sparse data such as latency against load) and writes base.png and
// base.svg.
func Lines(base string, fig Figure, series []Series, markers bool) error {
	p := plot.New()
	p.Title.Text = fig.Title
	p.X.Label.Text = fig.XLabel
	p.Y.Label.Text = fig.YLabel
	p.Legend.Top = !fig.legendLowerRight
	p.Legend.Left = false
	p.Add(plotter.NewGrid())
	if fig.LogX {
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	if fig.LogY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	drawn := 0
	for i, s := range series {
		if len(s.X) != len(s.Y) {
			return fmt.Errorf("plot %s: series %q has %d x and %d y values", base, s.Label, len(s.X), len(s.Y))
		}
		var xys plotter.XYs
		dropped := 0
		for j := range s.X {
			x, y := s.X[j], s.Y[j]
			if math.IsNaN(x) || math.IsNaN(y) || (fig.LogX && x <= 0) || (fig.LogY && y <= 0) {
				dropped++
				continue
			}
			xys = append(xys, plotter.XY{X: x, Y: y})
		}
		if len(xys) == 0 {
			continue
		}
		label := s.Label
		if dropped > 0 {
			label += fmt.Sprintf(" (%d points ≤ 0 not shown)", dropped)
		}
		line, err := plotter.NewLine(xys)
		if err != nil {
			return fmt.Errorf("plot %s: %w", base, err)
		}
		line.Color = plotutil.Color(i)
		line.Dashes = plotutil.Dashes(i)
		line.Width = vg.Points(1.5)
		p.Add(line)
		if markers {
			sc, err := plotter.NewScatter(xys)
			if err != nil {
				return fmt.Errorf("plot %s: %w", base, err)
			}
			sc.Color = plotutil.Color(i)
			sc.Shape = plotutil.Shape(i)
			p.Add(sc)
			p.Legend.Add(label, line, sc)
		} else {
			p.Legend.Add(label, line)
		}
		drawn++
	}
	if fig.yRange != nil {
		p.Y.Min, p.Y.Max = fig.yRange[0], fig.yRange[1]
	}
	if drawn == 0 {
		return fmt.Errorf("plot %s: nothing to draw", base)
	}
	p.Legend.TextStyle.Color = color.Black
	p.Legend.Padding = vg.Points(2)
	p.Legend.ThumbnailWidth = vg.Points(24)
	var errs []error
	for _, ext := range []string{".png", ".svg"} {
		if err := p.Save(width, height, base+ext); err != nil {
			errs = append(errs, fmt.Errorf("plot %s%s: %w", base, ext, err))
		}
	}
	return errors.Join(errs...)
}
