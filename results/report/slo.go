package report

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/fabric-emu/fabric/results/flows"
)

// Objective is one bound of a traffic class's SLO: the class's p99 (and/or
// median) slowdown within a size range is at most the given value, e.g.
// SWP §2.1's {p99_slowdown: 2.5, below: 1bdp}. The zero range is every
// message of the class.
type Objective struct {
	P99Slowdown float64 `yaml:"p99_slowdown,omitempty" json:"p99_slowdown,omitempty"`
	P50Slowdown float64 `yaml:"p50_slowdown,omitempty" json:"p50_slowdown,omitempty"`
	flows.Range `yaml:",inline"`
}

// String is the objective as tables show it: "p99 ≤ 2.5 (<1bdp)".
func (o Objective) String() string {
	var parts []string
	if o.P50Slowdown > 0 {
		parts = append(parts, "p50 ≤ "+strconv.FormatFloat(o.P50Slowdown, 'g', -1, 64))
	}
	if o.P99Slowdown > 0 {
		parts = append(parts, "p99 ≤ "+strconv.FormatFloat(o.P99Slowdown, 'g', -1, 64))
	}
	return strings.Join(parts, ", ") + " (" + o.Name() + ")"
}

// Check says what is wrong with the objective: the field at fault and the
// problem, or "" when nothing is.
func (o Objective) Check() (field, problem string) {
	if o.P99Slowdown == 0 && o.P50Slowdown == 0 {
		return "p99_slowdown", "an objective needs p99_slowdown and/or p50_slowdown, e.g. {p99_slowdown: 2.5, below: 1bdp}"
	}
	for _, b := range []struct {
		name string
		v    float64
	}{{"p99_slowdown", o.P99Slowdown}, {"p50_slowdown", o.P50Slowdown}} {
		if b.v != 0 && !(b.v >= 1) {
			return b.name, fmt.Sprintf("a slowdown is at least 1 (the message alone in the lab), got %v", b.v)
		}
	}
	return o.Range.Check()
}

// SLO is a class's service-level objective: every Objective must hold.
// A file gives one objective as a mapping or several as a list.
type SLO []Objective

// UnmarshalYAML accepts one objective or a list. It decodes through the
// file's own decoder, so unknown keys are still errors at their line.
func (s *SLO) UnmarshalYAML(unmarshal func(any) error) error {
	var raw any
	if err := unmarshal(&raw); err != nil {
		return err
	}
	if _, list := raw.([]any); list {
		var all []Objective
		if err := unmarshal(&all); err != nil {
			return err
		}
		*s = all
		return nil
	}
	var one Objective
	if err := unmarshal(&one); err != nil {
		return err
	}
	*s = SLO{one}
	return nil
}

// ClassMeta is what meta.json records of a traffic class: its code point,
// the share of the bottleneck it offers at the trial's point, and its SLO.
type ClassMeta struct {
	Name string  `json:"name"`
	DSCP uint8   `json:"dscp"`
	Load float64 `json:"load"`
	SLO  SLO     `json:"slo,omitempty"`
}
