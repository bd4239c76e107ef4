package flows

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/fabric-emu/fabric/internal/units"
	"github.com/fabric-emu/fabric/internal/yamlfile"
)

// Traffic classes (SWP, Zhao et al.: "SLOs without priorities") are
// independent streams of messages mixed into one schedule, each with its
// own sizes, arrivals and code point; every record carries its class
// (transport.Flow.Class). An SLO bounds a class's slowdown in a size
// range, and the ranges that matter to it are stated against the
// bandwidth-delay product: SWP's §2.1 takes the p99 slowdown of messages
// below one BDP, §5.2 enforces twice the threshold on larger ones.

// BDP is the bandwidth-delay product in bytes: the bottleneck rate times
// the unloaded RTT measured in the lab (0 when either is unknown).
func (i Ideal) BDP() int64 {
	return int64(math.Round(i.BottleneckBPS * i.RTT.Seconds() / 8))
}

// Bound is a message size: bytes, or a multiple of the BDP ("1bdp"),
// which is known only once a trial has measured its RTT.
type Bound struct {
	Bytes int64
	BDPs  float64
}

// ParseBound reads "1bdp", "0.5bdp" or a size such as "125KB".
func ParseBound(s string) (Bound, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	if n, ok := strings.CutSuffix(t, "bdp"); ok {
		v, err := strconv.ParseFloat(strings.TrimSpace(n), 64)
		if err != nil || !(v > 0) || math.IsInf(v, 0) {
			return Bound{}, fmt.Errorf("size %q: want a positive multiple of the BDP such as 1bdp", s)
		}
		return Bound{BDPs: v}, nil
	}
	sz, err := units.ParseSize(s)
	if err != nil {
		return Bound{}, fmt.Errorf("%v, or a multiple of the BDP such as 1bdp", err)
	}
	if sz == 0 {
		return Bound{}, fmt.Errorf("size %q: want a positive size", s)
	}
	return Bound{Bytes: int64(sz)}, nil
}

// IsZero reports whether the bound is unset.
func (b Bound) IsZero() bool { return b.Bytes == 0 && b.BDPs == 0 }

// String writes the bound as ParseBound reads it.
func (b Bound) String() string {
	switch {
	case b.BDPs > 0:
		return strconv.FormatFloat(b.BDPs, 'g', -1, 64) + "bdp"
	case b.Bytes > 0:
		return units.Size(b.Bytes).String()
	}
	return ""
}

// Resolve is the bound in bytes for a trial whose BDP is bdp.
func (b Bound) Resolve(bdp int64) int64 {
	if b.BDPs > 0 {
		return int64(math.Round(b.BDPs * float64(bdp)))
	}
	return b.Bytes
}

// UnmarshalYAML accepts what ParseBound does, with the line on error.
func (b *Bound) UnmarshalYAML(n *yaml.Node) error {
	v, err := ParseBound(n.Value)
	if err != nil {
		return yamlfile.LineError(n, "%v", err)
	}
	*b = v
	return nil
}

// MarshalText writes the bound as text (meta.json).
func (b Bound) MarshalText() ([]byte, error) { return []byte(b.String()), nil }

// UnmarshalText is MarshalText's inverse.
func (b *Bound) UnmarshalText(t []byte) error {
	if len(t) == 0 {
		*b = Bound{}
		return nil
	}
	v, err := ParseBound(string(t))
	*b = v
	return err
}

// Range selects messages by size: all of them (the zero Range), those
// smaller than Below, those at least AtLeast, or a named range of
// SizeBuckets ("<10KB", …, or "all").
type Range struct {
	Below   Bound  `yaml:"below,omitempty" json:"below,omitzero"`
	AtLeast Bound  `yaml:"at_least,omitempty" json:"at_least,omitzero"`
	Named   string `yaml:"range,omitempty" json:"range,omitempty"`
}

// RangeNames are the names a Range's Named may take.
func RangeNames() []string {
	out := []string{"all"}
	for _, b := range SizeBuckets {
		out = append(out, b.Name)
	}
	return out
}

// Check says what is wrong with the range, as the field at fault and the
// problem, or "" when nothing is.
func (r Range) Check() (field, problem string) {
	set := 0
	for _, on := range []bool{!r.Below.IsZero(), !r.AtLeast.IsZero(), r.Named != ""} {
		if on {
			set++
		}
	}
	switch {
	case set > 1:
		return "", "give one of below, at_least and range"
	case r.Named != "" && !slices.Contains(RangeNames(), r.Named):
		return "range", fmt.Sprintf("unknown size range %q (want one of %s, or below/at_least a size such as 1bdp or 100KB)",
			r.Named, strings.Join(RangeNames(), ", "))
	}
	return "", ""
}

// Name is how tables name the range: "all", "<1bdp", "≥1bdp", "<10KB".
func (r Range) Name() string {
	switch {
	case !r.Below.IsZero():
		return "<" + r.Below.String()
	case !r.AtLeast.IsZero():
		return "≥" + r.AtLeast.String()
	case r.Named != "":
		return r.Named
	}
	return "all"
}

// Bucket is the range in bytes for a trial whose BDP is bdp.
func (r Range) Bucket(bdp int64) Bucket {
	switch {
	case !r.Below.IsZero():
		return Bucket{Name: r.Name(), Min: 0, Max: r.Below.Resolve(bdp) - 1}
	case !r.AtLeast.IsZero():
		return Bucket{Name: r.Name(), Min: r.AtLeast.Resolve(bdp), Max: math.MaxInt64}
	}
	for _, b := range SizeBuckets {
		if b.Name == r.Named {
			return b
		}
	}
	return Bucket{Name: "all", Min: 0, Max: math.MaxInt64}
}

// BelowBDP is the range of messages smaller than one BDP, which every
// class's table shows (SWP §2.1's range).
var BelowBDP = Range{Below: Bound{BDPs: 1}}

// ClassNames are the classes of the trial's completed flows, in the order
// they first appear ("" for flows without a class is left out).
func (a *Analysis) ClassNames() []string {
	var out []string
	for _, s := range a.samples {
		if s.class != "" && !slices.Contains(out, s.class) {
			out = append(out, s.class)
		}
	}
	return out
}

// Class summarises the completed flows of one class within a size range,
// from the same slowdowns as every other table; the range's bounds in
// BDPs are resolved with the trial's (Ideal.BDP).
func (a *Analysis) Class(class string, r Range) BucketStats {
	b := r.Bucket(a.Ideal.BDP())
	return a.collect(r.Name(), func(s sample) bool { return s.class == class && b.Contains(s.size) })
}
