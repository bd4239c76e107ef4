package experiments

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fabric-emu/fabric/internal/units"
	"github.com/fabric-emu/fabric/internal/yamlfile"
)

// paperExperiment is written at a paper's rates and times, with every kind
// of field the scaling rule touches or keeps.
const paperExperiment = `name: paper
lab:
  name: pap
  topology: {kind: star, hosts: 3}
  links: {rate: 10Gbit, delay: {down: 2us}, host: {delay: {up: 1us}}}
  ports: {rate: 8Gbit, buffer: 700KB, marking: {ecn: {threshold: 30KB}}, overrides: {"s0:eth0": {rate: 5Gbit}}}
  hosts:
    rto_min: 2ms
    nic: {rate: 10Gbit, buffer: 100KB}
    pacer: {rate_interval: 64us, idle_timeout: 10ms, line_rate: 10Gbit, min_rate: 1Gbit, beta: 16, buffer: 30KB}
scale: 100
schemes:
  dctcp: {cc: dctcp, links: {delay: {up: 3us}}, ports: {rate: 4Gbit, marking: {ecn: {threshold: 60KB}}}}
  mine:
    transport: {command: [./mine]}
    args: {resend_after: 1ms, rate: 1Gbit, iw: 30KB, paths: 4, name: x}
traffic: {pattern: incast, client: h0, servers: rest, size: 30KB, gap: 1ms, interval: 2ms}
sweep: {scheme: all, delay: [2us, 5us]}
duration: 50ms
measure: {warmup: 5ms, probe: {from: h1, to: h0}}
quick: {scale: 10, duration: 20ms}
`

// The scaling rule, worked by hand at s = 100: every rate divided by 100,
// every time multiplied by 100, every byte kept.
func TestScaledAppliesTheRule(t *testing.T) {
	spec, err := Parse("paper.yaml", []byte(paperExperiment), "")
	if err != nil {
		t.Fatal(err)
	}
	if spec.minScale != 100 {
		t.Errorf("minScale = %g, want the fixed 100", spec.minScale)
	}
	s := spec.scaledBy(100)
	l := s.LabSpec
	rate := func(r *units.Rate) units.Rate {
		if r == nil {
			return 0
		}
		return *r
	}
	dur := func(d *time.Duration) time.Duration {
		if d == nil {
			return -1
		}
		return *d
	}
	checks := []struct {
		what      string
		got, want any
	}{
		{"links.rate", rate(l.Links.Rate), 100 * units.Mbit},
		{"links.delay.down", dur(l.Links.Delay.Down), 200 * time.Microsecond},
		{"links.host.delay.up", dur(l.Links.Host.Delay.Up), 100 * time.Microsecond},
		{"ports.rate", rate(l.Ports.Rate), 80 * units.Mbit},
		{"ports.buffer", l.Ports.Buffer.Bytes, 700 * units.KB},
		{"ports.marking.ecn.threshold", l.Ports.Marking.ECN.Threshold, 30 * units.KB},
		{"ports.overrides rate", rate(l.Ports.Overrides["s0:eth0"].Rate), 50 * units.Mbit},
		{"hosts.rto_min", l.Hosts.RTOMin, 200 * time.Millisecond},
		{"hosts.nic.rate", rate(l.Hosts.NIC.Rate), 100 * units.Mbit},
		{"hosts.nic.buffer", l.Hosts.NIC.Buffer.Bytes, 100 * units.KB},
		{"pacer.rate_interval", l.Hosts.Pacer.RateInterval, 6400 * time.Microsecond},
		{"pacer.idle_timeout", l.Hosts.Pacer.IdleTimeout, time.Second},
		{"pacer.line_rate", l.Hosts.Pacer.LineRate, 100 * units.Mbit},
		{"pacer.min_rate", l.Hosts.Pacer.MinRate, 10 * units.Mbit},
		{"pacer.beta", l.Hosts.Pacer.Beta, 0.16},
		{"pacer.buffer", l.Hosts.Pacer.Buffer, 30 * units.KB},
		{"duration", s.Duration, 5 * time.Second},
		{"measure.warmup", s.Measure.Warmup, 500 * time.Millisecond},
		{"measure.probe's interval (HULL's 1 ms)", s.Measure.Probe.every(), 100 * time.Millisecond},
		{"traffic.gap", s.Traffic.Gap, 100 * time.Millisecond},
		{"traffic.interval", s.Traffic.Interval, 200 * time.Millisecond},
		{"traffic.size", s.Traffic.Size, 30 * units.KB},
		{"schemes.dctcp.links.delay.up", dur(s.Schemes["dctcp"].Links.Delay.Up), 300 * time.Microsecond},
		{"schemes.dctcp.ports.rate", rate(s.Schemes["dctcp"].Ports.Rate), 40 * units.Mbit},
		{"schemes.dctcp.ports threshold", s.Schemes["dctcp"].Ports.Marking.ECN.Threshold, 60 * units.KB},
		{"args.resend_after", s.Schemes["mine"].Args["resend_after"], "100ms"},
		{"args.rate", s.Schemes["mine"].Args["rate"], "10Mbit"},
		{"args.iw", s.Schemes["mine"].Args["iw"], "30KB"},
		{"args.paths", s.Schemes["mine"].Args["paths"], 4},
		{"args.name", s.Schemes["mine"].Args["name"], "x"},
		// The sweep and its points stay in the paper's units (they name
		// the points); the lab a point runs on has its delay scaled.
		{"sweep.delay", time.Duration(s.Sweep.Delay[1]), 5 * time.Microsecond},
		{"point lab delay", dur(s.labFor(s.Schemes["dctcp"], s.Points()[2], "x").Links.Delay.Up), 500 * time.Microsecond},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
		}
	}
	if spec.Duration != 50*time.Millisecond || *spec.LabSpec.Links.Rate != 10*units.Gbit || spec.Measure.Probe.every() != time.Millisecond {
		t.Errorf("scaling changed the spec as written: duration %v, rate %v, probe interval %v", spec.Duration, *spec.LabSpec.Links.Rate, spec.Measure.Probe.every())
	}
	if s.graph == nil || s.graph.Hosts()[0].Ifaces[0].Link.Rate != 100*units.Mbit {
		t.Errorf("the scaled spec's graph is not the scaled lab's")
	}
	q := spec.WithQuick()
	if f := q.runnableScale(); f != 10 {
		t.Errorf("quick variant runs at s = %g, want its pinned 10", f)
	}
	if d := q.scaledBy(q.runnableScale()).Duration; d != 200*time.Millisecond {
		t.Errorf("quick duration %v at s = 10, want 200ms", d)
	}
}

// scale: auto starts the ladder at the least s its lab builds at: HULL's
// T_r of 64 µs needs s ≥ 200 µs / 64 µs = 3.125, so 5.
func TestAutoStartsWhereTheLabBuilds(t *testing.T) {
	text := strings.Replace(paperExperiment, "scale: 100", "scale: auto", 1)
	text = strings.Replace(text, "    rto_min: 2ms\n", "", 1)
	spec, err := Parse("paper.yaml", []byte(text), "")
	if err != nil {
		t.Fatal(err)
	}
	if spec.minScale != 5 {
		t.Errorf("minScale = %g, want 5", spec.minScale)
	}
	if got := Ladder()[:7]; got[0] != 1 || got[1] != 2 || got[2] != 5 || got[3] != 10 || got[6] != 100 {
		t.Errorf("ladder starts %v, want 1 2 5 10 20 50 100", got)
	}
}

// Bad scales are bad input, at their file and line.
func TestBadScale(t *testing.T) {
	for _, c := range []struct{ from, to, want string }{
		{"scale: 100", "scale: {factor: auto, paper_rate: 1Gbit}", "bad.yaml:11: scale.factor: factor auto says the file is written at the paper's"},
		{"scale: 100", "scale: 0.5", "bad.yaml:11: scale: want auto or a factor of at least 1"},
		{"scale: 100", "scale: 2", "bad.yaml:10: lab.hosts.pacer.rate_interval: at s = 2: 128µs is shorter than a userspace loop can keep"},
		{"quick: {scale: 10, duration: 20ms}", "quick: {scale: {paper_rate: 1Gbit}}", "bad.yaml:21: quick.scale: want auto or a number"},
		{"quick: {scale: 10, duration: 20ms}", "quick: {scale: 2}", "bad.yaml:21: quick.scale: the lab does not build at s = 2"},
		{"sweep: {scheme: all, delay: [2us, 5us]}", "search: {rate: {min: 1Gbit, max: 10Gbit}}", "bad.yaml:11: scale: a capacity search chooses the link rate itself"},
	} {
		text := strings.Replace(paperExperiment, c.from, c.to, 1)
		_, err := Parse("bad.yaml", []byte(text), "")
		var ye *yamlfile.Error
		if err == nil || !errors.As(err, &ye) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: got %v, want a file error containing %q", c.to, err, c.want)
		}
	}
	// An emulation-scale file's quick variant cannot pin s, and --scale
	// cannot scale a file that states a paper rate: it is scaled already.
	emu := strings.Replace(strings.Replace(paperExperiment, "scale: 100", "scale: {paper_rate: 1Tbit}", 1),
		"rate_interval: 64us, ", "", 1)
	emu = strings.Replace(emu, "    rto_min: 2ms\n", "", 1)
	if _, err := Parse("bad.yaml", []byte(emu), ""); err == nil || !strings.Contains(err.Error(), "bad.yaml:20: quick.scale: a quick variant's s scales a file written at the paper's") {
		t.Errorf("quick.scale in an emulation-scale file: %v", err)
	}
	spec, err := Parse("emu.yaml", []byte(strings.Replace(emu, "quick: {scale: 10, duration: 20ms}", "quick: {duration: 20ms}", 1)), "")
	if err != nil {
		t.Fatal(err)
	}
	err = spec.SetScale("auto")
	var ye *yamlfile.Error
	if !errors.As(err, &ye) || !strings.Contains(err.Error(), "emu.yaml:10: scale: --scale auto scales a file written at the paper's") {
		t.Errorf("--scale auto on a paper_rate file: %v", err)
	}
	if err := spec.SetScale("fast"); err == nil || errors.As(err, &ye) || !strings.Contains(err.Error(), "--scale: want auto or a factor") {
		t.Errorf("--scale fast: %v, want a one-line flag error", err)
	}
}
