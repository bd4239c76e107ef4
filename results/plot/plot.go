// Package plot draws fabric's figures with gonum/plot, each as a PNG and an
// SVG: CDFs overlaid per scheme, latency against load, throughput time
// series, and a lab's topology (Topology). Every axis carries its unit.
package plot

import (
	"errors"
	"fmt"
	"image/color"
	"math"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/fabric-emu/fabric/results/stats"
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
	// XTimeUS says the x values are times in µs and XLabel has no unit:
	// the axis shows µs, ms or s, whichever keeps its numbers short.
	XTimeUS bool
	// legendLowerRight puts the legend where a CDF has no curve.
	legendLowerRight bool
	yRange           *[2]float64
}

// WantsLogX reports whether values spanning [lo, hi] read better on a log
// axis: more than two decades.
func WantsLogX(lo, hi float64) bool { return lo > 0 && hi/lo > 100 }

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

// drawable is the points of s that the figure's axes can show (no NaN,
// nothing at or below zero on a log axis) and how many it left out.
func drawable(fig Figure, s Series) (xys plotter.XYs, dropped int) {
	for j := range s.X {
		x, y := s.X[j], s.Y[j]
		if math.IsNaN(x) || math.IsNaN(y) || (fig.LogX && x <= 0) || (fig.LogY && y <= 0) {
			dropped++
			continue
		}
		xys = append(xys, plotter.XY{X: x, Y: y})
	}
	return xys, dropped
}

// addSeries draws the i-th series as a line, with markers if asked, and
// gives it its legend entry.
func addSeries(p *plot.Plot, i int, label string, xys plotter.XYs, markers bool) error {
	line, err := plotter.NewLine(xys)
	if err != nil {
		return err
	}
	line.Color = plotutil.Color(i)
	line.Dashes = plotutil.Dashes(i)
	line.Width = vg.Points(1.5)
	p.Add(line)
	if !markers {
		p.Legend.Add(label, line)
		return nil
	}
	sc, err := plotter.NewScatter(xys)
	if err != nil {
		return err
	}
	sc.Color = plotutil.Color(i)
	sc.Shape = plotutil.Shape(i)
	p.Add(sc)
	p.Legend.Add(label, line, sc)
	return nil
}

// Lines draws the series as lines (with point markers if markers is set,
// for sparse data such as latency against load) and writes base.png and
// base.svg.
func Lines(base string, fig Figure, series []Series, markers bool) error {
	if fig.XTimeUS {
		fig, series = inTimeUnit(fig, series)
	}
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
		xys, dropped := drawable(fig, s)
		if len(xys) == 0 {
			continue
		}
		label := s.Label
		if dropped > 0 {
			label += fmt.Sprintf(" (%d points ≤ 0 not shown)", dropped)
		}
		if err := addSeries(p, i, label, xys, markers); err != nil {
			return fmt.Errorf("plot %s: %w", base, err)
		}
		drawn++
	}
	if fig.yRange != nil {
		p.Y.Min, p.Y.Max = fig.yRange[0], fig.yRange[1]
	}
	if drawn == 0 {
		return fmt.Errorf("plot %s: nothing to draw", base)
	}
	return save(p, base, labels(series))
}

func labels(series []Series) []string {
	var out []string
	for _, s := range series {
		out = append(out, s.Label)
	}
	return out
}

// save writes base.png and base.svg with the legend in a column of its own
// right of the axes, where it cannot hide a curve.
func save(p *plot.Plot, base string, names []string) error {
	legend := p.Legend
	legend.TextStyle.Color = color.Black
	legend.Padding = vg.Points(2)
	legend.ThumbnailWidth = vg.Points(24)
	legend.Top, legend.Left = true, true
	p.Legend = plot.NewLegend() // nothing drawn inside the axes
	var widest vg.Length
	for _, n := range names {
		widest = max(widest, legend.TextStyle.Width(n))
	}
	legendW := min(widest+legend.ThumbnailWidth+vg.Points(16), 3*vg.Inch)
	var errs []error
	for _, ext := range []string{".png", ".svg"} {
		var c vg.CanvasWriterTo
		if ext == ".png" {
			c = vgimg.PngCanvas{Canvas: vgimg.New(width+legendW, height)}
		} else {
			c = vgsvg.New(width+legendW, height)
		}
		dc := draw.New(c)
		p.Draw(draw.Crop(dc, 0, -legendW, 0, 0))
		legend.Draw(draw.Crop(dc, width+vg.Points(4), 0, 0, -vg.Points(24)))
		if err := writeFile(base+ext, c); err != nil {
			errs = append(errs, fmt.Errorf("plot %s%s: %w", base, ext, err))
		}
	}
	return errors.Join(errs...)
}

func writeFile(name string, c vg.CanvasWriterTo) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	_, err = c.WriteTo(f)
	return errors.Join(err, f.Close())
}

// inTimeUnit rescales µs x values to the unit their largest value reads
// best in and puts the unit on the axis label.
func inTimeUnit(fig Figure, series []Series) (Figure, []Series) {
	hi := 0.0
	for _, s := range series {
		for _, x := range s.X {
			if !math.IsNaN(x) {
				hi = max(hi, x)
			}
		}
	}
	unit, div := "µs", 1.0
	switch {
	case hi >= 10e6:
		unit, div = "s", 1e6
	case hi >= 10e3:
		unit, div = "ms", 1e3
	}
	out := make([]Series, len(series))
	for i, s := range series {
		out[i] = Series{Label: s.Label, Y: s.Y, X: make([]float64, len(s.X))}
		for j, x := range s.X {
			out[i].X[j] = x / div
		}
	}
	fig.XLabel += " (" + unit + ")"
	fig.XTimeUS = false
	return fig, out
}
