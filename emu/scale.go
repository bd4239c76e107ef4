package emu

import (
	"math"
	"time"

	"github.com/fabric-emu/fabric/internal/units"
	"github.com/fabric-emu/fabric/tc"
)

// Scaled returns the lab at time scale f, by the scaling rule
// (docs/design.md): every rate divided by f (links, ports, the hosts'
// NICs, the pacer's line and least rates and β, a rate per byte), every
// time multiplied by f (link delays, the pacer's T_r and idle timeout,
// hosts.rto_min, rounded to the whole milliseconds a route carries),
// every byte kept. A link whose rate the file leaves to the default gets
// the default divided by f. Errors of the copy's Validate name the
// original file's lines.
func (s Spec) Scaled(f float64) *Spec {
	if f == 1 {
		return &s
	}
	rate := func(r *units.Rate) *units.Rate {
		if r == nil {
			return nil
		}
		v := ScaleRate(*r, f)
		return &v
	}
	l := s.Links
	if l.Rate == nil {
		def := DefaultRate
		l.Rate = &def
	}
	l.LinkDefaults = scaleLinkDefaults(l.LinkDefaults, f, rate)
	l.Host = scaleLinkDefaults(l.Host, f, rate)
	l.Fabric = scaleLinkDefaults(l.Fabric, f, rate)
	s.Links = l
	links := make([]CustomLink, len(s.Topology.Links))
	for i, cl := range s.Topology.Links {
		cl.Rate, cl.Delay = rate(cl.Rate), scaleDelay(cl.Delay, f)
		links[i] = cl
	}
	s.Topology.Links = links
	s.Ports = ScalePorts(s.Ports, f)
	s.Hosts.NIC = scalePort(s.Hosts.NIC, f)
	s.Hosts.Pacer = scalePacer(s.Hosts.Pacer, f)
	if s.Hosts.Overrides != nil {
		o := make(map[string]HostOverride, len(s.Hosts.Overrides))
		for name, v := range s.Hosts.Overrides {
			v.Pacer = scalePacer(v.Pacer, f)
			o[name] = v
		}
		s.Hosts.Overrides = o
	}
	if s.Hosts.RTOMin > 0 {
		s.Hosts.RTOMin = max(ScaleTime(s.Hosts.RTOMin, f).Round(time.Millisecond), time.Millisecond)
	}
	s.resolved = nil
	return &s
}

// ScaleRate is r divided by f, to the bit per second.
func ScaleRate(r units.Rate, f float64) units.Rate { return units.Rate(math.Round(float64(r) / f)) }

// ScaleTime is d multiplied by f, to the nanosecond.
func ScaleTime(d time.Duration, f float64) time.Duration {
	return time.Duration(math.Round(float64(d) * f))
}

func scaleLinkDefaults(d LinkDefaults, f float64, rate func(*units.Rate) *units.Rate) LinkDefaults {
	d.Rate, d.Delay = rate(d.Rate), scaleDelay(d.Delay, f)
	return d
}

func scaleDelay(d *Delay, f float64) *Delay {
	if d == nil {
		return nil
	}
	out := Delay{}
	for _, p := range []struct{ from, to **time.Duration }{{&d.Up, &out.Up}, {&d.Down, &out.Down}} {
		if *p.from != nil {
			v := ScaleTime(**p.from, f)
			*p.to = &v
		}
	}
	return &out
}

// Scaled is w at time scale f: every delay multiplied by f, losses kept.
func (w Impairments) Scaled(f float64) Impairments {
	w.Delay = scaleDelay(w.Delay, f)
	for _, l := range []**ImpairmentLayer{&w.Host, &w.Fabric} {
		if *l != nil {
			c := **l
			c.Delay = scaleDelay(c.Delay, f)
			*l = &c
		}
	}
	return w
}

// ScalePorts is a ports section at time scale f: every rate divided by f,
// buffers, thresholds and weights kept.
func ScalePorts(p tc.SwitchPorts, f float64) tc.SwitchPorts {
	p.PortSettings = scalePort(p.PortSettings, f)
	scaleMap := func(m map[string]tc.PortSettings) map[string]tc.PortSettings {
		if m == nil {
			return nil
		}
		out := make(map[string]tc.PortSettings, len(m))
		for k, v := range m {
			out[k] = scalePort(v, f)
		}
		return out
	}
	p.Tiers, p.Overrides = scaleMap(p.Tiers), scaleMap(p.Overrides)
	return p
}

func scalePort(p tc.PortSettings, f float64) tc.PortSettings {
	if p.Rate != nil {
		r := ScaleRate(*p.Rate, f)
		p.Rate = &r
	}
	return p
}

// scalePacer scales a pacer section's times and rates. β is left unset
// when the file leaves it so: tc/pacer derives it from the scaled T_r.
func scalePacer(p *PacerSpec, f float64) *PacerSpec {
	if p == nil {
		return nil
	}
	c := *p
	c.RateInterval = ScaleTime(c.RateInterval, f)
	c.IdleTimeout = ScaleTime(c.IdleTimeout, f)
	c.LineRate, c.MinRate = ScaleRate(c.LineRate, f), ScaleRate(c.MinRate, f)
	c.Beta /= f // a rate per byte of backlog
	return &c
}
