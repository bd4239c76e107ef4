package plot

import (
	"fmt"
	"image/color"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
)

// Layer is one band of a stacked plot: its height at each of the plot's
// x values, and its colour (nil: the next of the palette's).
type Layer struct {
	Label string
	Y     []float64
	Color color.Color
}

// stackColors tell nine bands apart, also to colour-blind readers: Paul
// Tol's "muted" qualitative scheme (SRON, "Colour schemes",
// personal.sron.nl/~pault).
var stackColors = []color.Color{
	rgb(0xCC6677), rgb(0x332288), rgb(0xDDCC77), rgb(0x117733), rgb(0x88CCEE),
	rgb(0x882255), rgb(0x44AA99), rgb(0x999933), rgb(0xAA4499),
}

// Pale is the scheme's pale grey, for a band that is nothing in
// particular, such as idle time.
var Pale = rgb(0xDDDDDD)

func rgb(v uint32) color.Color {
	return color.RGBA{R: uint8(v >> 16), G: uint8(v >> 8), B: uint8(v), A: 0xff}
}

// Stacked draws the layers as filled bands over x, the first at the
// bottom and each on top of those before it (a stacked area plot), and
// writes base.png and base.svg. A negative height draws as zero: a band
// cannot be thinner than nothing.
func Stacked(base string, fig Figure, x []float64, layers []Layer) error {
	if len(x) < 2 {
		return fmt.Errorf("plot %s: a stacked plot needs two x values, has %d", base, len(x))
	}
	p := plot.New()
	p.Title.Text = fig.Title
	p.X.Label.Text = fig.XLabel
	p.Y.Label.Text = fig.YLabel
	p.Add(plotter.NewGrid())
	below := make([]float64, len(x))
	var names []string
	var bands []*plotter.Polygon
	for i, l := range layers {
		if len(l.Y) != len(x) {
			return fmt.Errorf("plot %s: layer %q has %d values for %d x values", base, l.Label, len(l.Y), len(x))
		}
		ring := make(plotter.XYs, 0, 2*len(x))
		top := make([]float64, len(x))
		for j := range x {
			top[j] = below[j] + max(l.Y[j], 0)
			ring = append(ring, plotter.XY{X: x[j], Y: top[j]})
		}
		for j := len(x) - 1; j >= 0; j-- {
			ring = append(ring, plotter.XY{X: x[j], Y: below[j]})
		}
		poly, err := plotter.NewPolygon(ring)
		if err != nil {
			return fmt.Errorf("plot %s: %w", base, err)
		}
		poly.Color = l.Color
		if poly.Color == nil {
			poly.Color = stackColors[i%len(stackColors)]
		}
		poly.LineStyle.Width = 0
		poly.LineStyle.Color = color.Transparent
		p.Add(poly)
		below = top
		names = append(names, l.Label)
		bands = append(bands, poly)
	}
	// The legend lists the layers top first, as they lie.
	for i := len(bands) - 1; i >= 0; i-- {
		p.Legend.Add(names[i], bands[i])
	}
	p.Y.Min, p.Y.Max = 0, slices.Max(below)
	p.X.Min, p.X.Max = x[0], x[len(x)-1]
	return save(p, base, names)
}
