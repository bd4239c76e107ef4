package plot

import (
	"bytes"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fabric-emu/fabric/results/stats"
)

// TestFiguresAreWritten draws one figure of each kind and checks that the
// PNG decodes at the documented size and the SVG carries the axis labels.
func TestFiguresAreWritten(t *testing.T) {
	dir := os.Getenv("FABRIC_PLOT_DIR") // set it to keep the images for a look
	if dir == "" {
		dir = t.TempDir()
	}
	var curves []Curve
	for i, scale := range []float64{300, 80, 15, 7} { // µs, like HULL's four schemes
		v := make([]float64, 5000)
		for j := range v {
			u := (float64(j) + 0.5) / float64(len(v))
			v[j] = -scale * math.Log(1-u) // exponential quantiles
		}
		curves = append(curves, Curve{Label: []string{"TCP-DropTail", "DCTCP-30K", "DCTCP-6K-Pacer", "DCTCP-PQ950-Pacer"}[i], Points: stats.CDF(v, 500)})
	}
	cdf := filepath.Join(dir, "latency-cdf")
	if err := CDF(cdf, Figure{Title: "Switch latency, 40% load", XLabel: "switch latency (µs)", LogX: true}, curves); err != nil {
		t.Fatal(err)
	}
	load := filepath.Join(dir, "latency-vs-load")
	if err := Lines(load, Figure{Title: "Mean switch latency", XLabel: "offered load (%)", YLabel: "mean switch latency (µs)", LogY: true}, []Series{
		{Label: "TCP-DropTail", X: []float64{20, 40, 60}, Y: []float64{111.5, 329.3, 720.5}},
		{Label: "DCTCP-PQ950-Pacer", X: []float64{20, 40, 60}, Y: []float64{2.8, 7.0, 13.5}},
	}, true); err != nil {
		t.Fatal(err)
	}
	stacked := filepath.Join(dir, "cpu-stacked")
	if err := Stacked(stacked, Figure{Title: "Where the CPU went", XLabel: "time (s)", YLabel: "share of the machine's CPU (%)"},
		[]float64{0.5, 1.5, 2.5}, []Layer{
			{Label: "transports", Y: []float64{20, 30, 25}},
			{Label: "softirq", Y: []float64{10, -2, 15}}, // a negative height draws as none
			{Label: "idle", Y: []float64{70, 72, 60}, Color: Pale},
		}); err != nil {
		t.Fatal(err)
	}
	if err := Stacked(stacked, Figure{}, []float64{1, 2}, []Layer{{Label: "short", Y: []float64{1}}}); err == nil {
		t.Error("a layer with fewer values than x values was drawn")
	}
	for _, base := range []string{cdf, load, stacked} {
		b, err := os.ReadFile(base + ".png")
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("%s.png: %v", base, err)
		}
		// 6 inches of axes and a legend column beside them.
		if w := img.Bounds().Dx(); w <= 6*96 || w > 9*96 {
			t.Errorf("%s.png is %d px wide, want 576 for the axes plus the legend's column", base, w)
		}
		svg, err := os.ReadFile(base + ".svg")
		if err != nil || !bytes.Contains(svg, []byte("(µs)")) && !bytes.Contains(svg, []byte("(%)")) {
			t.Errorf("%s.svg: %v; axis unit missing", base, err)
		}
	}
	err := Lines(filepath.Join(dir, "empty"), Figure{LogX: true}, []Series{{Label: "x", X: []float64{0}, Y: []float64{1}}}, false)
	if err == nil || !strings.Contains(err.Error(), "nothing to draw") {
		t.Fatalf("all-nonpositive log plot: %v", err)
	}
}
