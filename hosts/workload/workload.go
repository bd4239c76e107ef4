// Package workload loads flow-size distributions in the format of its
// built-in set (data/, embedded; data/README.md gives each file's source)
// and draws sizes from them.
//
// A file is "# key: value" header comments followed by "<size_bytes>
// <cdf_fraction>" lines. Empirical files ("# discrete: false", the default)
// are piecewise-linear CDFs whose first point may carry a point mass;
// "# discrete: true" files (hull_1k_10m) list the only sizes there are.
package workload

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/fabric-emu/fabric/internal/yamlfile"
)

// CDF is a flow-size distribution: P(size <= Sizes[i]) = Probs[i].
type CDF struct {
	Name     string // the file's base name without .cdf
	File     string // where it was read from
	Discrete bool   // sample only the listed sizes; never interpolate
	sizes    []float64
	probs    []float64
}

// Points returns the CDF's points (size, P(size <= size)).
func (c *CDF) Points() (sizes, probs []float64) {
	return append([]float64(nil), c.sizes...), append([]float64(nil), c.probs...)
}

// Load reads a CDF file. Errors name the file and line (*yamlfile.Error,
// so the command line maps them to "bad input").
func Load(file string) (*CDF, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, &yamlfile.Error{File: file, Msg: err.Error()}
	}
	defer f.Close()
	c, err := Parse(file, f)
	if err != nil {
		return nil, err
	}
	// File travels to endpoint processes started elsewhere (Config.Args),
	// so it must not depend on this process's working directory.
	if abs, err := filepath.Abs(file); err == nil {
		c.File = abs
	}
	return c, nil
}

// Parse reads a CDF from r; file names it in errors and in CDF.Name.
func Parse(file string, r io.Reader) (*CDF, error) {
	c := &CDF{File: file, Name: strings.TrimSuffix(filepath.Base(file), ".cdf")}
	sc := bufio.NewScanner(r)
	lastLine := 0
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		var err error
		switch {
		case line == "":
		case strings.HasPrefix(line, "#"):
			err = c.parseComment(line)
		default:
			err = c.parsePoint(line)
			lastLine = n
		}
		if err != nil {
			return nil, c.lineError(n, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, &yamlfile.Error{File: file, Msg: err.Error()}
	}
	if len(c.sizes) == 0 {
		return nil, c.lineError(1, fieldError{"", "no data lines (want \"<size_bytes> <cdf_fraction>\")"})
	}
	if last := c.probs[len(c.probs)-1]; last != 1 {
		return nil, c.lineError(lastLine, fieldError{"cdf", fmt.Sprintf("the last CDF value must be exactly 1, got %v", last)})
	}
	return c, nil
}

// fieldError is a problem with one field of a line, before the line number
// is attached.
type fieldError struct{ field, msg string }

func (e fieldError) Error() string { return e.field + ": " + e.msg }

func bad(field, format string, args ...any) error {
	return fieldError{field, fmt.Sprintf(format, args...)}
}

func (c *CDF) lineError(line int, err error) error {
	fe := err.(fieldError)
	return &yamlfile.Error{File: c.File, Line: line, Field: fe.field, Msg: fe.msg}
}

// parseComment reads the one comment key a CDF file may set, discrete.
func (c *CDF) parseComment(line string) error {
	key, val, ok := strings.Cut(strings.TrimSpace(line[1:]), ":")
	if !ok || strings.TrimSpace(key) != "discrete" {
		return nil
	}
	// The value may be followed by a remark; the first word decides.
	word, _, _ := strings.Cut(strings.TrimSpace(val), " ")
	switch word {
	case "true":
		c.Discrete = true
	case "false":
		c.Discrete = false
	default:
		return bad("discrete", "want true or false, got %q", word)
	}
	return nil
}

// parsePoint reads one "<size_bytes> <cdf_fraction>" line; neither column
// may decrease.
func (c *CDF) parsePoint(line string) error {
	fields := strings.Fields(line)
	if len(fields) != 2 {
		return bad("", "want \"<size_bytes> <cdf_fraction>\", got %q", line)
	}
	size, err := strconv.ParseFloat(fields[0], 64)
	if err != nil || math.IsNaN(size) || math.IsInf(size, 0) || size < 0 || size != math.Trunc(size) {
		return bad("size", "want a whole number of bytes >= 0, got %q", fields[0])
	}
	p, err := strconv.ParseFloat(fields[1], 64)
	if err != nil || math.IsNaN(p) || p < 0 || p > 1 {
		return bad("cdf", "want a fraction in [0, 1], got %q", fields[1])
	}
	if k := len(c.sizes); k > 0 {
		if size < c.sizes[k-1] {
			return bad("size", "sizes must not decrease: %v after %v", size, c.sizes[k-1])
		}
		if p < c.probs[k-1] {
			return bad("cdf", "CDF must not decrease: %v after %v (not monotone)", p, c.probs[k-1])
		}
	}
	c.sizes = append(c.sizes, size)
	c.probs = append(c.probs, p)
	return nil
}

// Mean is the expected size in bytes: the probability-weighted sum of the
// listed sizes for a discrete CDF; for a piecewise-linear one, the point
// mass at the first size plus the midpoint of every linear segment.
func (c *CDF) Mean() float64 {
	m := c.sizes[0] * c.probs[0]
	for i := 1; i < len(c.sizes); i++ {
		dp := c.probs[i] - c.probs[i-1]
		if c.Discrete {
			m += dp * c.sizes[i]
		} else {
			m += dp * (c.sizes[i-1] + c.sizes[i]) / 2
		}
	}
	return m
}

// At returns P(size <= x).
func (c *CDF) At(x float64) float64 {
	// i is the first point with size > x.
	i := sort.SearchFloat64s(c.sizes, math.Nextafter(x, math.Inf(1)))
	switch {
	case i == 0:
		return 0
	case i == len(c.sizes):
		return 1
	case c.Discrete:
		return c.probs[i-1]
	}
	lo, hi := c.sizes[i-1], c.sizes[i]
	return c.probs[i-1] + (x-lo)/(hi-lo)*(c.probs[i]-c.probs[i-1])
}

// Quantile is the inverse CDF: the smallest size s with P(size <= s) >= u,
// interpolated for piecewise-linear CDFs.
func (c *CDF) Quantile(u float64) float64 {
	// i is the first point whose cumulative probability reaches u, so
	// probs[i-1] < u <= probs[i] and the segment below i has mass.
	i := sort.SearchFloat64s(c.probs, u)
	if i >= len(c.probs) {
		i = len(c.probs) - 1
	}
	if i == 0 || c.Discrete {
		return c.sizes[i]
	}
	lo, hi := c.probs[i-1], c.probs[i]
	return c.sizes[i-1] + (u-lo)/(hi-lo)*(c.sizes[i]-c.sizes[i-1])
}

// Sampler draws sizes by inverse transform from a seeded generator, so a
// rerun with the same seed draws the same sequence of sizes. It is not safe
// for concurrent use.
type Sampler struct {
	cdf *CDF
	rng *rand.Rand
}

// NewSampler seeds a sampler. Different streams of one run (for example,
// sizes and inter-arrival times) should use different seeds or generators.
func (c *CDF) NewSampler(seed uint64) *Sampler {
	return &Sampler{cdf: c, rng: rand.New(rand.NewPCG(seed, 0x5eed_f10e))}
}

// Next draws one size in whole bytes. A continuous draw is rounded up, so
// the integer sizes have exactly the file's CDF at every whole byte count:
// P(ceil(X) <= n) = P(X <= n).
func (s *Sampler) Next() int64 {
	u := s.rng.Float64()
	// Float64 is in [0,1); u = 0 would pick the first size even when it
	// has no mass, so draw from (0,1].
	return int64(math.Ceil(s.cdf.Quantile(1 - u)))
}
