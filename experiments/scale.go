package experiments

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/fabric-emu/fabric/emu"
	"github.com/fabric-emu/fabric/internal/units"
	"github.com/fabric-emu/fabric/internal/yamlfile"
)

// Scale is an experiment's `scale:`, the scaling rule's factor s
// (docs/design.md): a lab runs a paper's link rate C at C/s, every time
// multiplied by s and every byte kept.
//
//	scale: auto                  # written at the paper's rates and times: fabric picks s per point
//	scale: 10                    # the same, at s = 10
//	scale: {paper_rate: 1Gbit}   # written at the emulation's: s is the paper's rate over the lab's bottleneck
//
// With auto or a number fabric applies the rule itself and the report
// stays in the paper's units; with paper_rate the file is already scaled
// and the report shows raw and paper-scale figures side by side.
type Scale struct {
	// PaperRate is the rate the paper's link ran at, for a file written
	// at the emulation's scale.
	PaperRate units.Rate `yaml:"paper_rate,omitempty" json:"paper_rate,omitempty"`
	// Auto picks s per point; Fixed is a given s. Either says the file is
	// written at the paper's scale.
	Auto  bool    `yaml:"-" json:"auto,omitempty"`
	Fixed float64 `yaml:"-" json:"factor,omitempty"`
}

// UnmarshalYAML accepts auto, a number, or {paper_rate: R}; a mapping
// may say {factor: auto|N} too, but never beside paper_rate.
func (s *Scale) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		return s.set(n, n.Value)
	}
	if n.Kind != yaml.MappingNode {
		return yamlfile.LineError(n, "want auto, a number (s) or {paper_rate: RATE}")
	}
	var factor *yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		switch k.Value {
		case "paper_rate":
			r, err := units.ParseRate(v.Value)
			if err != nil || r <= 0 {
				return yamlfile.LineError(v, "paper_rate: want a rate such as 10Gbit, got %q", v.Value)
			}
			s.PaperRate = r
		case "factor":
			factor = v
		default:
			return yamlfile.LineError(k, "unknown key %q in scale (want paper_rate or factor)", k.Value)
		}
	}
	if factor == nil {
		return nil
	}
	if s.PaperRate > 0 {
		return yamlfile.LineError(factor, "factor %s says the file is written at the paper's rates and times, paper_rate that it is written "+
			"at the emulation's, already scaled: give one of them", factor.Value)
	}
	return s.set(factor, factor.Value)
}

// set reads auto or a number.
func (s *Scale) set(n *yaml.Node, v string) error {
	if v == "auto" {
		s.Auto = true
		return nil
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f < 1 || math.IsInf(f, 0) {
		return yamlfile.LineError(n, "want auto or a factor of at least 1, got %q", v)
	}
	s.Fixed = f
	return nil
}

// PaperScale says the file is written at the paper's rates and times
// (auto or a fixed s), and fabric scales it.
func (s *Scale) PaperScale() bool { return s != nil && (s.Auto || s.Fixed > 0) }

// Factor is s for a lab written at the emulation's scale whose bottleneck
// runs at bps (0 without a paper rate).
func (s *Scale) Factor(bps float64) float64 {
	if s == nil || s.PaperRate <= 0 || bps <= 0 {
		return 0
	}
	return float64(s.PaperRate) / bps
}

// String is how a plan names the scale: "auto", "10", "paper rate 1Gbit".
func (s *Scale) String() string {
	switch {
	case s == nil:
		return "none"
	case s.Auto:
		return "auto"
	case s.Fixed > 0:
		return strconv.FormatFloat(s.Fixed, 'g', -1, 64)
	}
	return "paper rate " + s.PaperRate.String()
}

// Ladder is the rungs `scale: auto` chooses s from: 1, 2, 5, 10, 20,
// 50, … up to MaxScale.
func Ladder() []float64 {
	var out []float64
	for decade := 1.0; decade <= MaxScale; decade *= 10 {
		for _, m := range []float64{1, 2, 5} {
			if decade*m <= MaxScale {
				out = append(out, decade*m)
			}
		}
	}
	return out
}

// MaxScale is the top of the ladder: a second of a paper's traffic then
// takes almost twelve days.
const MaxScale = 1e6

// SetScale is `fabric run --scale auto|N`: the file's rates and times are
// taken as the paper's and scaled, as with `scale:` in the file. A file
// that states a paper_rate is written at the emulation's scale already,
// which the flag would scale twice: that is bad input, at the file's
// scale line.
func (s *Spec) SetScale(flag string) error {
	var sc Scale
	if err := sc.set(&yaml.Node{}, flag); err != nil {
		return fmt.Errorf("--scale: want auto or a factor of at least 1, got %q", flag)
	}
	if s.Scale != nil && s.Scale.PaperRate > 0 {
		return s.errorf("scale", "--scale %s scales a file written at the paper's rates and times; this one states paper_rate %v, "+
			"so it is written at the emulation's, already scaled", flag, s.Scale.PaperRate)
	}
	c := *s
	c.Scale, c.IsQuick = &sc, s.IsQuick
	v, err := c.checkScaled()
	if err != nil {
		return err
	}
	*s = *v
	return nil
}

// errorf is a file:line: field: message error about the spec's file.
func (s *Spec) errorf(path, format string, args ...any) error {
	if s.doc == nil {
		return &yamlfile.Error{File: s.File, Field: path, Msg: fmt.Sprintf(format, args...)}
	}
	return s.doc.Errorf(path, format, args...)
}

// checkScaled readies a spec written at the paper's scale: it finds the
// least rung at which its lab builds (minScale) and validates the
// experiment there, its lab and schemes as they will run. It returns the
// spec with the defaults validation fills in.
func (s *Spec) checkScaled() (*Spec, error) {
	c := *s
	if !s.Scale.PaperScale() {
		return &c, nil
	}
	if s.Search != nil {
		return nil, s.errorf("scale", "a capacity search chooses the link rate itself: write the file at the emulation's rates and "+
			"state the paper's with {paper_rate: …}")
	}
	if q := s.Quick; q != nil && q.Search != nil {
		return nil, s.errorf("quick.search", "a capacity search chooses the link rate itself, which a file at the paper's scale "+
			"(scale: %s) leaves to fabric", s.Scale)
	}
	if err := s.checkQuickScale(); err != nil {
		return nil, err
	}
	rungs := Ladder()
	if f := s.Scale.Fixed; f > 0 {
		rungs = []float64{f}
	}
	var first error
	for _, f := range rungs {
		if err := s.LabSpec.Scaled(f).Validate(); err != nil {
			if first == nil {
				first = err
			}
			continue
		}
		c.minScale = f
		break
	}
	if c.minScale == 0 {
		return nil, s.labError(first, rungs[0])
	}
	g, err := s.LabSpec.Scaled(c.minScale).Resolve()
	if err != nil {
		return nil, s.labError(err, c.minScale)
	}
	c.graph = g
	v := c.scaledBy(c.minScale)
	if err := v.validate(); err != nil {
		return nil, c.doc.Wrap(err)
	}
	c.Trials, c.cdfs = v.Trials, v.cdfs
	return &c, nil
}

// labError places an error of the lab scaled by f at its line: in the lab
// file, or in this file for an inline lab.
func (s *Spec) labError(err error, f float64) error {
	ye, ok := err.(*yamlfile.Error)
	if !ok {
		return s.errorf("lab", "at s = %g: %v", f, err)
	}
	if s.Lab.Kind == yaml.MappingNode { // inline: the field is under lab
		path := "lab"
		if ye.Field != "" {
			path += "." + ye.Field
		}
		return s.errorf(path, "at s = %g: %s", f, ye.Msg)
	}
	c := *ye
	c.Msg = fmt.Sprintf("at s = %g (the experiment's scale): %s", f, ye.Msg)
	return &c
}

// scaledBy is the experiment at time scale f, by the scaling rule: its
// lab (emu.Spec.Scaled), the schemes' link delays and port rates, the
// transports' args written as durations or rates, the duration, warm-up,
// and the traffic's gaps and intervals; bytes and loads kept. The sweep
// and its points stay as written, in the paper's units: labFor scales a
// point's delay and rate.
func (s *Spec) scaledBy(f float64) *Spec {
	c := *s
	c.applied = f
	if f == 1 {
		return &c
	}
	c.LabSpec = s.LabSpec.Scaled(f)
	c.Duration = emu.ScaleTime(s.Duration, f)
	c.Measure.Warmup = emu.ScaleTime(s.Measure.Warmup, f)
	c.Traffic.Gap = emu.ScaleTime(s.Traffic.Gap, f)
	c.Traffic.Interval = emu.ScaleTime(s.Traffic.Interval, f)
	if pr := s.Measure.Probe; pr != nil {
		scaled := *pr
		scaled.Interval = emu.ScaleTime(pr.every(), f)
		c.Measure.Probe = &scaled
	}
	c.Schemes = make(map[string]Scheme, len(s.Schemes))
	for name, sc := range s.Schemes {
		sc.Links = sc.Links.Scaled(f)
		sc.Ports = emu.ScalePorts(sc.Ports, f)
		sc.Args = scaleArgs(sc.Args, f)
		c.Schemes[name] = sc
	}
	if s.graph != nil {
		if g, err := c.LabSpec.Resolve(); err == nil {
			c.graph = g
		}
	}
	return &c
}

// scaleArgs scales a transport's args: a string that reads as a duration
// (homa's resend_after, ndp's rto) is multiplied by f, one that reads as
// a rate divided by it; numbers and other values pass as written, since
// fabric cannot know their unit.
func scaleArgs(args map[string]any, f float64) map[string]any {
	if args == nil {
		return nil
	}
	out := maps.Clone(args)
	for k, v := range args {
		str, ok := v.(string)
		if !ok {
			continue
		}
		if d, err := time.ParseDuration(str); err == nil && strings.IndexFunc(str, isUnitLetter) >= 0 {
			out[k] = emu.ScaleTime(d, f).String()
		} else if r, err := units.ParseRate(str); err == nil && strings.IndexFunc(str, isUnitLetter) >= 0 {
			out[k] = emu.ScaleRate(r, f).String()
		}
	}
	return out
}

func isUnitLetter(r rune) bool { return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' }

// pointScale is the factor labFor scales a point's swept delay and rate
// by: the spec's applied s, or 1.
func (s *Spec) pointScale() float64 {
	if s.applied > 0 {
		return s.applied
	}
	return 1
}

// checkQuickScale checks the quick.scale of a file written at the
// paper's scale: auto or a number at which the lab builds.
func (s *Spec) checkQuickScale() error {
	q := s.Quick
	if q == nil || q.Scale == nil {
		return nil
	}
	switch {
	case q.Scale.PaperRate > 0:
		return s.errorf("quick.scale", "want auto or a number: paper_rate says a file is written at the emulation's scale, "+
			"which this one is not")
	case q.Scale.Fixed > 0:
		if err := s.LabSpec.Scaled(q.Scale.Fixed).Validate(); err != nil {
			var ye *yamlfile.Error
			msg := err.Error()
			if errors.As(err, &ye) {
				msg = strings.TrimPrefix(ye.Field+": "+ye.Msg, ": ")
			}
			return s.errorf("quick.scale", "the lab does not build at s = %g: %s", q.Scale.Fixed, msg)
		}
	}
	return nil
}
