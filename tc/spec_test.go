package tc

import (
	"errors"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/fabric-emu/fabric/internal/units"
	"github.com/fabric-emu/fabric/internal/yamlfile"
)

func TestParseBuffer(t *testing.T) {
	for in, want := range map[string]Buffer{
		"700KB": {Bytes: 700 * units.KB}, "100pkts": {Packets: 100}, "100 packets": {Packets: 100},
		"30pkt": {Packets: 30}, "150000": {Bytes: 150000}, "1.5MB": {Bytes: 1500 * units.KB},
	} {
		got, err := ParseBuffer(in)
		if err != nil || got != want {
			t.Errorf("ParseBuffer(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "-3pkts", "1.5pkts", "fast", "10Mbit"} {
		if b, err := ParseBuffer(in); err == nil {
			t.Errorf("ParseBuffer(%q) = %+v, want an error", in, b)
		}
	}
	var s PortSettings
	err := yaml.Unmarshal([]byte("buffer: lots\n"), &s)
	if err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("bad buffer in YAML: %v, want a line error", err)
	}
}

func TestForMergesLayers(t *testing.T) {
	var p SwitchPorts
	src := `
rate: 1Gbit
buffer: 700KB
marking: {ecn: {threshold: 30KB}}
tiers:
  core: {rate: 10Gbit, marking: {phantom: {drain: 0.95, threshold: 1KB}}}
overrides:
  "c0:eth1": {buffer: 100pkts}
`
	if err := yaml.Unmarshal([]byte(src), &p); err != nil {
		t.Fatal(err)
	}
	got := p.For("c0", "core", "eth1")
	if *got.Rate != 10*units.Gbit || got.Buffer.Packets != 100 || got.Marking.ECN != nil || got.Marking.Phantom == nil {
		t.Errorf("For(c0, core, eth1) = rate %v buffer %v marking %+v", got.Rate, got.Buffer, got.Marking)
	}
	edge := p.For("e0", "edge", "eth0")
	if *edge.Rate != units.Gbit || edge.Buffer.Bytes != 700*units.KB || edge.Marking.ECN == nil {
		t.Errorf("defaults not applied: %+v", edge)
	}
}

// Every bad value the issue lists gives a FieldError naming the field.
func TestResolveBadInput(t *testing.T) {
	size := func(s units.Size) *Buffer { return &Buffer{Bytes: s} }
	cases := []struct {
		name  string
		spec  PortSettings
		field string
		msg   string
	}{
		{"threshold above buffer", PortSettings{Buffer: size(20 * units.KB), Marking: &MarkingSpec{ECN: &ECNSpec{Threshold: 30 * units.KB}}}, "marking.ecn.threshold", "larger than the buffer"},
		{"threshold above packet buffer", PortSettings{Buffer: &Buffer{Packets: 10}, Marking: &MarkingSpec{ECN: &ECNSpec{Threshold: 30 * units.KB}}}, "marking.ecn.threshold", "larger than the buffer"},
		{"drain zero", PortSettings{Marking: &MarkingSpec{Phantom: &PhantomSpec{Drain: 0, Threshold: 1000}}}, "marking.phantom.drain", "0 < drain <= 1"},
		{"drain above one", PortSettings{Marking: &MarkingSpec{Phantom: &PhantomSpec{Drain: 1.01, Threshold: 1000}}}, "marking.phantom.drain", "0 < drain <= 1"},
		{"nine bands", PortSettings{Queues: &QueuesSpec{Bands: 9}}, "queues.bands", "at most 8"},
		{"weights count", PortSettings{Queues: &QueuesSpec{Bands: 2, Weights: []int{3, 1, 1}}}, "queues.weights", "3 weights for 2 bands"},
		{"zero weight", PortSettings{Queues: &QueuesSpec{Weights: []int{3, 0}}}, "queues.weights[1]", "positive"},
		{"both markers", PortSettings{Marking: &MarkingSpec{ECN: &ECNSpec{Threshold: 1}, Phantom: &PhantomSpec{Drain: 0.9, Threshold: 1}}}, "marking", "choose one"},
		{"buffer below a frame", PortSettings{Buffer: size(1000)}, "buffer", "full-size frame"},
		{"classifier", PortSettings{Queues: &QueuesSpec{Bands: 2, Classify: "port"}}, "queues.classify", "only dscp"},
	}
	for _, c := range cases {
		_, err := c.spec.Resolve(units.Gbit, 1500)
		var fe *yamlfile.FieldError
		if !errors.As(err, &fe) {
			t.Errorf("%s: %v, want a FieldError", c.name, err)
			continue
		}
		if fe.Path != c.field || !strings.Contains(fe.Err.Error(), c.msg) {
			t.Errorf("%s: %s: %v; want %s: …%s…", c.name, fe.Path, fe.Err, c.field, c.msg)
		}
	}
}

func TestResolveDefaultsAndBands(t *testing.T) {
	p, err := PortSettings{}.Resolve(100*units.Mbit, 1500)
	if err != nil {
		t.Fatal(err)
	}
	if p.Rate != 100*units.Mbit || p.BufferBytes() != DefaultBuffer || p.Bands != 1 {
		t.Errorf("plain port = %+v", p)
	}
	if _, err := (PortSettings{}).Resolve(0, 1500); err == nil {
		t.Error("no rate anywhere: want an error")
	}
	p, _ = PortSettings{Queues: &QueuesSpec{Bands: 3}}.Resolve(units.Gbit, 1500)
	// CS7 → band 0, CS6 → band 1, CS5..CS0 clamped to band 2.
	if p.BandOf != [8]uint8{2, 2, 2, 2, 2, 2, 1, 0} {
		t.Errorf("band map %v", p.BandOf)
	}
	fast := 10 * units.Gbit
	p, _ = PortSettings{Rate: &fast}.Resolve(units.Gbit, 1500)
	if len(p.Warnings()) != 1 {
		t.Errorf("10 Gbit: warnings %v, want the CPU limit", p.Warnings())
	}
}

func TestValidatePaths(t *testing.T) {
	p := &SwitchPorts{Tiers: map[string]PortSettings{"spine": {}}}
	err := p.Validate([]string{"edge", "agg", "core"})
	var fe *yamlfile.FieldError
	if !errors.As(err, &fe) || fe.Path != "tiers.spine" {
		t.Errorf("unknown tier: %v", err)
	}
	p = &SwitchPorts{Overrides: map[string]PortSettings{"s0eth1": {}}}
	if err := p.Validate(nil); !errors.As(err, &fe) || fe.Path != "overrides.s0eth1" {
		t.Errorf("bad override key: %v", err)
	}
	p = &SwitchPorts{Tiers: map[string]PortSettings{"edge": {Queues: &QueuesSpec{Bands: 12}}}}
	if err := p.Validate([]string{"edge"}); !errors.As(err, &fe) || fe.Path != "tiers.edge.queues.bands" {
		t.Errorf("bad tier layer: %v", err)
	}
}
