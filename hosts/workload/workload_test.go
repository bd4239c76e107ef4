package workload

import (
	"bufio"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/fabric-emu/fabric/internal/yamlfile"
)

// shippedDir is the repository's copy of the built-in workloads (the
// embedded files).
func shippedDir(t *testing.T) string {
	t.Helper()
	return "data"
}

func shippedFiles(t *testing.T) []string {
	files, err := filepath.Glob(filepath.Join(shippedDir(t), "*.cdf"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no workload files: %v", err)
	}
	return files
}

// ksInteger is the Kolmogorov–Smirnov distance between the empirical CDF of
// integer draws and the CDF of the integer-valued variable, which equals
// c.At at every whole number (draws are rounded up). Both are step
// functions on the integers, so the supremum is taken at sample values and
// just below the next one.
func ksInteger(c *CDF, draws []int64) float64 {
	s := slices.Clone(draws)
	slices.Sort(s)
	n := float64(len(s))
	d := c.At(float64(s[0] - 1)) // below the smallest draw the sample CDF is 0
	for i := 0; i < len(s); {
		j := i
		for j < len(s) && s[j] == s[i] {
			j++
		}
		fn := float64(j) / n
		d = max(d, math.Abs(fn-c.At(float64(s[i]))))
		if j < len(s) {
			d = max(d, math.Abs(fn-c.At(float64(s[j]-1))))
		}
		i = j
	}
	return d
}

// headerMean reads "# mean_bytes: <v>" from a shipped file.
func headerMean(t *testing.T, file string) float64 {
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "# mean_bytes:"); ok {
			v, err := strconv.ParseFloat(strings.Fields(rest)[0], 64)
			if err != nil {
				t.Fatalf("%s: mean_bytes: %v", file, err)
			}
			return v
		}
	}
	t.Fatalf("%s: no mean_bytes header", file)
	return 0
}

// TestSamplingMatchesCDF is the workload-sampling check: 10,000
// draws from every shipped workload are within KS distance 0.02 of the file.
func TestSamplingMatchesCDF(t *testing.T) {
	for _, file := range shippedFiles(t) {
		c, err := Load(file)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(c.Name, func(t *testing.T) {
			// A seed per file, so the files are not all judged on one
			// sequence of uniforms (KS is invariant under the inverse
			// transform, so one seed would give one distance for all).
			s := c.NewSampler(uint64(len(c.Name))*1000 + uint64(c.Name[0])*7 + uint64(c.Name[len(c.Name)-1]))
			draws := make([]int64, 10000)
			for i := range draws {
				draws[i] = s.Next()
			}
			d := ksInteger(c, draws)
			t.Logf("%s: KS distance of 10,000 draws = %.4f", c.Name, d)
			if d >= 0.02 {
				t.Errorf("KS distance %.4f >= 0.02", d)
			}
		})
	}
}

// TestMeanMatchesHeader checks Mean against the mean the data set's
// curator computed (README rules: piecewise-linear, discrete for HULL).
func TestMeanMatchesHeader(t *testing.T) {
	for _, file := range shippedFiles(t) {
		c, err := Load(file)
		if err != nil {
			t.Fatal(err)
		}
		want := headerMean(t, file)
		if got := c.Mean(); math.Abs(got-want) > 1e-4*want+0.1 {
			t.Errorf("%s: Mean() = %.1f, header says %.1f", c.Name, got, want)
		}
	}
}

func TestDiscreteHullNeverInterpolates(t *testing.T) {
	c, err := Open("hull_1k_10m", []string{shippedDir(t)})
	if err != nil {
		t.Fatal(err)
	}
	if !c.Discrete {
		t.Fatal("hull_1k_10m not read as discrete")
	}
	s := c.NewSampler(7)
	small := 0
	for range 10000 {
		switch v := s.Next(); v {
		case 1000:
			small++
		case 10_000_000:
		default:
			t.Fatalf("drew %d, want only 1000 or 10000000", v)
		}
	}
	if small < 7800 || small > 8200 { // 80% ± 5σ (σ = 40)
		t.Errorf("%d of 10000 draws were 1 KB, want about 8000", small)
	}
	if math.Abs(c.Mean()-2_000_800) > 1e-6 {
		t.Errorf("mean %v, want 2000800", c.Mean())
	}
}

func TestSameSeedSameSizes(t *testing.T) {
	c, err := Open("websearch", []string{shippedDir(t)})
	if err != nil {
		t.Fatal(err)
	}
	a, b, other := c.NewSampler(9), c.NewSampler(9), c.NewSampler(10)
	differs := false
	for range 1000 {
		x, y, z := a.Next(), b.Next(), other.Next()
		if x != y {
			t.Fatalf("same seed drew %d and %d", x, y)
		}
		differs = differs || x != z
	}
	if !differs {
		t.Error("seeds 9 and 10 drew identical sequences")
	}
}

func TestPointMassAtFirstSize(t *testing.T) {
	c, err := Parse("mass.cdf", strings.NewReader("100 0.25\n200 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.At(99); got != 0 {
		t.Errorf("At(99) = %v, want 0", got)
	}
	if got := c.At(100); got != 0.25 {
		t.Errorf("At(100) = %v, want 0.25", got)
	}
	if got := c.At(150); got != 0.625 {
		t.Errorf("At(150) = %v, want 0.625", got)
	}
	if got := c.Mean(); got != 0.25*100+0.75*150 {
		t.Errorf("Mean = %v", got)
	}
}

// Built-in names resolve from the embedded set, wherever the program runs;
// a directory given first wins; a path is read as a file.
func TestOpenBuiltinDirAndPath(t *testing.T) {
	t.Chdir(t.TempDir()) // no checkout around: the binary must carry its data
	c, err := Open("google_rpc", nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.File != "builtin:google_rpc" || c.Mean() < 2800 || c.Mean() > 3000 {
		t.Errorf("built-in google_rpc: file %s, mean %.0f", c.File, c.Mean())
	}
	if n := len(Builtins()); n != 11 {
		t.Errorf("%d built-in workloads, want the 11 shipped", n)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "google_rpc.cdf"), []byte("5 0.5\n7 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if c, err := Open("google_rpc", []string{dir}); err != nil || c.Mean() > 7 {
		t.Errorf("a directory given first: %v, mean %v", err, c.Mean())
	}
	if _, err := Open(filepath.Join(dir, "google_rpc.cdf"), nil); err != nil {
		t.Errorf("by path: %v", err)
	}
	if _, err := Open("no_such_workload", nil); err == nil || !strings.Contains(err.Error(), "not built in") {
		t.Errorf("missing workload: %v", err)
	}
}

// TestBadInput: every malformed file is rejected with its file and line.
func TestBadInput(t *testing.T) {
	cases := []struct {
		name, text string
		line       int
		field      string
		msg        string
	}{
		{"non-monotone cdf", "# discrete: false\n10 0.2\n20 0.5\n30 0.4\n40 1\n", 4, "cdf", "not monotone"},
		{"decreasing size", "10 0.2\n5 0.5\n40 1\n", 2, "size", "must not decrease"},
		{"bad number", "10 0.2\n2O 0.5\n40 1\n", 2, "size", `"2O"`},
		{"fraction above 1", "10 0.2\n20 1.5\n", 2, "cdf", "[0, 1]"},
		{"fractional bytes", "10.5 0.2\n20 1\n", 1, "size", "whole number"},
		{"three columns", "10 0.2 x\n20 1\n", 1, "", "want"},
		{"last not 1", "10 0.2\n\n20 0.9\n# trailing comment\n", 3, "cdf", "exactly 1"},
		{"empty", "# only comments\n", 1, "", "no data"},
		{"bad discrete", "# discrete: maybe\n1 1\n", 1, "discrete", "true or false"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "bad.cdf")
			if err := os.WriteFile(file, []byte(tc.text), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := Load(file)
			var ye *yamlfile.Error
			if !errors.As(err, &ye) {
				t.Fatalf("err = %v, want a *yamlfile.Error", err)
			}
			if ye.File != file || ye.Line != tc.line || ye.Field != tc.field || !strings.Contains(ye.Msg, tc.msg) {
				t.Errorf("got %q (line %d, field %q), want line %d field %q containing %q", err, ye.Line, ye.Field, tc.line, tc.field, tc.msg)
			}
			if !strings.HasPrefix(err.Error(), file+":") {
				t.Errorf("message %q does not start with file:line", err)
			}
		})
	}
}
