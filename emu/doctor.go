package emu

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fabric-emu/fabric/hosts"
	"github.com/fabric-emu/fabric/hosts/cc"
	"github.com/fabric-emu/fabric/internal/features"
	"github.com/fabric-emu/fabric/internal/units"
	"github.com/fabric-emu/fabric/internal/yamlfile"
	"github.com/fabric-emu/fabric/tc"
	"github.com/fabric-emu/fabric/tc/delay"
)

// Kernel features a lab can need, as Need.Feature names them.
const (
	FeatureHTB          = "htb"
	FeatureBfifo        = "bfifo"
	FeatureClsact       = "clsact"
	FeatureClsBPF       = "cls_bpf"
	FeaturePortPrograms = "port eBPF programs"
	FeatureDCTCP        = "dctcp"
	FeatureDocker       = "docker"
	// FeatureDelayLines is NFQUEUE and nftables' compat expression, which
	// the delay lines of links with delay or loss use (tc/delay).
	FeatureDelayLines = "delay lines (nfqueue)"
)

// Need is a feature that one setting of a lab file needs.
type Need struct {
	Feature string `json:"feature"`
	// For names who needs it: "fabric: …" for every lab, else the
	// setting as file:line: field (or the field alone for specs built in Go).
	For string `json:"for"`
}

// everyLab is what every lab needs: a rate and a buffer on every port.
var everyLab = []Need{{FeatureHTB, "fabric: every port's rate"}, {FeatureBfifo, "fabric: every port's buffer"}}

// Needs lists the kernel and host features the lab needs, each with the
// first setting that needs it, and warnings about settings the machine may
// not carry (a port rate above what one CPU was measured to sustain).
func (s *Spec) Needs() (needs []Need, warnings []string, err error) {
	seen := map[Need]bool{}
	add := func(field string, features ...string) {
		for _, f := range features {
			n := Need{Feature: f, For: s.where(field)}
			if !seen[n] {
				seen[n] = true
				needs = append(needs, n)
			}
		}
	}
	needs = slices.Clone(everyLab)
	if cc.NeedsECN(s.Hosts.CC) {
		add("hosts.cc", FeatureDCTCP)
	}
	if s.Hosts.RuntimeName() == hosts.RuntimeDocker {
		add("hosts.runtime", FeatureDocker)
	}
	for _, f := range s.pacerFields() { // HULL's pacer: a tc program pair and an HTB bucket
		add(f, FeatureHTB, FeatureClsact, FeatureClsBPF)
	}
	for _, f := range s.impairmentFields() {
		add(f, FeatureDelayLines)
	}
	for _, l := range append(s.Ports.Layers("ports"), tc.Layer{Path: "hosts.nic", Settings: s.Hosts.NIC}) {
		w, err := s.portNeeds(l, add)
		if err != nil {
			return nil, nil, err
		}
		warnings = append(warnings, w...)
	}
	return needs, warnings, nil
}

// portNeeds adds what one layer of port settings needs.
func (s *Spec) portNeeds(l tc.Layer, add func(string, ...string)) ([]string, error) {
	set := l.Settings
	// The link rate is not known here; 1 Gbit stands in for an unset rate.
	p, err := set.Resolve(units.Gbit, DefaultMTU)
	if err != nil {
		return nil, s.Wrap(yamlfile.In(l.Path, err))
	}
	if p.Bands > 1 {
		add(l.Path+".queues", FeatureClsact, FeatureClsBPF, FeaturePortPrograms)
	}
	if set.Marking != nil {
		add(l.Path+".marking", FeatureClsact, FeatureClsBPF, FeaturePortPrograms)
	}
	var warnings []string
	if set.Rate != nil {
		for _, w := range p.Warnings() {
			warnings = append(warnings, s.where(l.Path+".rate")+": "+w)
		}
	}
	return warnings, nil
}

// pacerFields are the lab file's pacer sections.
func (s *Spec) pacerFields() []string {
	var out []string
	if s.Hosts.Pacer != nil {
		out = append(out, "hosts.pacer")
	}
	for _, h := range sortedKeys(s.Hosts.Overrides) {
		if s.Hosts.Overrides[h].Pacer != nil {
			out = append(out, "hosts.overrides."+h+".pacer")
		}
	}
	return out
}

// where names a field of the spec as file:line: field.
func (s *Spec) where(field string) string {
	if s.File == "" {
		return field
	}
	return fmt.Sprintf("%s:%d: %s", s.File, s.Locate(field), field)
}

// Diagnosis is what `fabric doctor` reports: what this machine can do and,
// for each lab file given, whether it has what the file needs.
type Diagnosis struct {
	*features.Report
	PortPrograms    bool   `json:"port_programs"`
	PortProgramsErr string `json:"port_programs_error,omitempty"`
	DCTCP           string `json:"dctcp"`       // which DCTCP a lab would use, or why none
	DelayLines      string `json:"delay_lines"` // the mechanism of link delay and loss, or why none
	MaxRate         string `json:"measured_max_rate"`
	// Timing is how late this machine, idle, lets a delay line's loop be.
	Timing   delay.MachineTiming `json:"timing"`
	Needs    []CheckedNeed       `json:"needs"`
	Warnings []string            `json:"warnings,omitempty"`
}

// CheckedNeed is a Need and whether this machine has it.
type CheckedNeed struct {
	Need
	OK     bool   `json:"ok"`
	Reason string `json:"reason,omitempty"`
}

// Diagnose probes the kernel and the Docker daemon and checks the needs of
// each spec against what it found.
func Diagnose(ctx context.Context, specs ...*Spec) (*Diagnosis, error) {
	// Timing first, while doctor's own probes do not yet load the machine.
	timing := delay.MeasureMachine(time.Second)
	d := &Diagnosis{Report: features.Detect(ctx), MaxRate: tc.MeasuredMaxRate.String(), Timing: timing}
	if err := tc.CheckPrograms(); err != nil {
		d.PortProgramsErr = err.Error()
	} else {
		d.PortPrograms = true
	}
	d.DelayLines = "nfqueue (copy-meta, batched verdicts) in a delay namespace"
	if err := delayAvailable(); err != nil {
		d.DelayLines = "unavailable: " + err.Error()
	}
	if info, err := cc.Describe(cc.DCTCP); err != nil {
		d.DCTCP = "unavailable: " + err.Error()
	} else {
		d.DCTCP = info.String()
	}
	for _, n := range everyLab {
		d.Needs = append(d.Needs, d.check(n))
	}
	for _, s := range specs {
		needs, warnings, err := s.Needs()
		if err != nil {
			return nil, err
		}
		for _, n := range needs[len(everyLab):] {
			d.Needs = append(d.Needs, d.check(n))
		}
		d.Warnings = append(d.Warnings, warnings...)
	}
	return d, nil
}

// Missing lists the needs this machine lacks, as "feature (who needs it)".
func (d *Diagnosis) Missing() []string {
	var out []string
	for _, n := range d.Needs {
		if !n.OK {
			out = append(out, n.Feature+" ("+n.For+")")
		}
	}
	return out
}

func (d *Diagnosis) check(n Need) CheckedNeed {
	c := CheckedNeed{Need: n}
	switch n.Feature {
	case FeatureHTB, FeatureBfifo, FeatureClsact:
		c.OK = d.Qdiscs[n.Feature]
	case FeatureClsBPF:
		c.OK, c.Reason = d.ClsBPF, d.ClsBPFErr
	case FeaturePortPrograms:
		c.OK, c.Reason = d.PortPrograms, d.PortProgramsErr
	case FeatureDCTCP:
		c.OK, c.Reason = !strings.HasPrefix(d.DCTCP, "unavailable"), d.DCTCP
	case FeatureDocker:
		c.OK, c.Reason = d.Docker, d.DockerErr
	case FeatureDelayLines:
		c.OK, c.Reason = !strings.HasPrefix(d.DelayLines, "unavailable"), d.DelayLines
	}
	return c
}
