package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"fabric/emu"
	"fabric/hosts/cc"
	"fabric/internal/doctor"
	"fabric/internal/units"
	"fabric/internal/yamlfile"
	"fabric/tc"
)

func init() { addCommand(doctorCmd()) }

func doctorCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "doctor [LAB.yaml...]",
		Short: "Check what this kernel and host can do, and what lab files need",
		Long: "doctor probes the kernel (qdiscs, by creating each in a throwaway namespace;\n" +
			"cls_bpf; fabric's port programs; BTF; struct_ops; congestion controls) and\n" +
			"the Docker daemon. Given lab files, it lists the features their port settings\n" +
			"need and exits 1 when one is missing, naming the setting that needs it.",
		RunE: func(cmd *cobra.Command, args []string) error {
			rep := report{Report: doctor.Probe(cmd.Context()), MaxRate: tc.MeasuredMaxRate.String()}
			if err := tc.CheckPrograms(); err != nil {
				rep.PortProgramsErr = err.Error()
			} else {
				rep.PortPrograms = true
			}
			if info, err := cc.Describe(cc.DCTCP); err != nil {
				rep.DCTCP = "unavailable: " + err.Error()
			} else {
				rep.DCTCP = info.String()
			}
			rep.Needs = append(rep.Needs, rep.baseNeeds()...)
			for _, file := range args {
				needs, warnings, err := labNeeds(file, &rep)
				if err != nil {
					return err // a bad lab file: exit 2 with file:line
				}
				rep.Needs = append(rep.Needs, needs...)
				rep.Warnings = append(rep.Warnings, warnings...)
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				if err := enc.Encode(rep); err != nil {
					return err
				}
			} else {
				rep.print(cmd.OutOrStdout())
			}
			var missing []string
			for _, n := range rep.Needs {
				if !n.OK {
					missing = append(missing, n.Feature+" ("+n.For+")")
				}
			}
			if len(missing) > 0 {
				return exitError{code: exitFailure, msg: "missing: " + strings.Join(missing, "; ")}
			}
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

type report struct {
	*doctor.Report
	PortPrograms    bool     `json:"port_programs"`
	PortProgramsErr string   `json:"port_programs_error,omitempty"`
	DCTCP           string   `json:"dctcp"`
	MaxRate         string   `json:"measured_max_rate"`
	Needs           []need   `json:"needs"`
	Warnings        []string `json:"warnings,omitempty"`
}

// need is one feature something requires, and whether it is there.
type need struct {
	Feature string `json:"feature"`
	For     string `json:"for"` // who needs it: "fabric" or file: field
	OK      bool   `json:"ok"`
	Reason  string `json:"reason,omitempty"`
}

// baseNeeds are what every lab needs: shaping and buffers on every port.
func (r *report) baseNeeds() []need {
	return []need{
		{Feature: "htb", For: "fabric: every port's rate", OK: r.Qdiscs["htb"]},
		{Feature: "bfifo", For: "fabric: every port's buffer", OK: r.Qdiscs["bfifo"]},
	}
}

func (r *report) programNeeds(why string) []need {
	return []need{
		{Feature: "clsact", For: why, OK: r.Qdiscs["clsact"]},
		{Feature: "cls_bpf", For: why, OK: r.ClsBPF, Reason: r.ClsBPFErr},
		{Feature: "port eBPF programs", For: why, OK: r.PortPrograms, Reason: r.PortProgramsErr},
	}
}

// labNeeds lists the features the port settings of file need.
func labNeeds(file string, r *report) ([]need, []string, error) {
	lf, err := emu.Load(file) // the whole file, as `fabric up` reads it
	if err != nil {
		return nil, nil, err
	}
	type layer struct {
		path string
		spec tc.PortSpec
	}
	layers := []layer{{"ports", lf.Ports.PortSpec}, {"hosts.nic", lf.Hosts.NIC}}
	for _, t := range slices.Sorted(maps.Keys(lf.Ports.Tiers)) {
		layers = append(layers, layer{"ports.tiers." + t, lf.Ports.PortSpec.Merge(lf.Ports.Tiers[t])})
	}
	for _, o := range slices.Sorted(maps.Keys(lf.Ports.Overrides)) {
		layers = append(layers, layer{"ports.overrides." + o, lf.Ports.PortSpec.Merge(lf.Ports.Overrides[o])})
	}
	var needs []need
	var warnings []string
	seen := map[string]bool{}
	add := func(ns ...need) {
		for _, n := range ns {
			if !seen[n.Feature+n.For] {
				seen[n.Feature+n.For] = true
				needs = append(needs, n)
			}
		}
	}
	if lf.Hosts.CC == cc.DCTCP {
		add(need{Feature: "dctcp", For: fmt.Sprintf("%s:%d: hosts.cc", file, lf.Locate("hosts.cc")),
			OK: !strings.HasPrefix(r.DCTCP, "unavailable"), Reason: r.DCTCP})
	}
	// HULL's pacer: a tc program pair on clsact and an HTB bucket class.
	pacerFields := []string{}
	if lf.Hosts.Pacer != nil {
		pacerFields = append(pacerFields, "hosts.pacer")
	}
	for _, h := range slices.Sorted(maps.Keys(lf.Hosts.Overrides)) {
		if lf.Hosts.Overrides[h].Pacer != nil {
			pacerFields = append(pacerFields, "hosts.overrides."+h+".pacer")
		}
	}
	for _, f := range pacerFields {
		why := fmt.Sprintf("%s:%d: %s", file, lf.Locate(f), f)
		add(need{Feature: "htb", For: why, OK: r.Qdiscs["htb"]},
			need{Feature: "clsact", For: why, OK: r.Qdiscs["clsact"]},
			need{Feature: "cls_bpf", For: why, OK: r.ClsBPF, Reason: r.ClsBPFErr})
	}
	for _, l := range layers {
		where := func(field string) string {
			return fmt.Sprintf("%s:%d: %s.%s", file, lf.Locate(l.path+"."+field), l.path, field)
		}
		s := l.spec
		if s.Delay != nil && *s.Delay > 0 {
			add(need{Feature: "netem", For: where("delay"), OK: r.Qdiscs["netem"],
				Reason: "delay needs the netem qdisc; this kernel has none (CONFIG_NET_SCH_NETEM)"})
			s.Delay = nil // reported above; Resolve would refuse it
		}
		// The link rate is not known here; 1 Gbit stands in for an unset rate.
		p, err := s.Resolve(units.Gbit, 1500)
		if err != nil {
			return nil, nil, lf.Wrap(yamlfile.In(l.path, err))
		}
		if p.Bands > 1 {
			add(r.programNeeds(where("queues"))...)
		}
		if s.Marking != nil {
			add(r.programNeeds(where("marking"))...)
		}
		if s.Rate != nil {
			for _, w := range p.Warnings() {
				warnings = append(warnings, where("rate")+": "+w)
			}
		}
	}
	return needs, warnings, nil
}

func (r *report) print(w io.Writer) {
	yes := func(ok bool, detail string) string {
		if ok {
			return "yes"
		}
		if detail != "" {
			return "NO (" + detail + ")"
		}
		return "NO"
	}
	var have, lack []string
	for _, q := range doctor.Qdiscs {
		if r.Qdiscs[q] {
			have = append(have, q)
		} else {
			lack = append(lack, q)
		}
	}
	fmt.Fprintf(w, "kernel        %s\n", r.Kernel)
	fmt.Fprintf(w, "qdiscs        %s\n", strings.Join(have, " "))
	fmt.Fprintf(w, "  absent      %s\n", strings.Join(lack, " "))
	if r.QdiscErr != "" {
		fmt.Fprintf(w, "  probe error %s\n", r.QdiscErr)
	}
	fmt.Fprintf(w, "cls_bpf       %s\n", yes(r.ClsBPF, r.ClsBPFErr))
	fmt.Fprintf(w, "port eBPF     %s\n", yes(r.PortPrograms, r.PortProgramsErr))
	fmt.Fprintf(w, "BTF           %s\n", yes(r.BTF, ""))
	fmt.Fprintf(w, "struct_ops    %s\n", yes(r.StructOps, r.StructOpsErr))
	fmt.Fprintf(w, "tcp cc        %s\n", strings.Join(r.CongestionControls, " "))
	fmt.Fprintf(w, "dctcp         %s\n", r.DCTCP)
	fmt.Fprintf(w, "netem         %s\n", yes(r.Qdiscs["netem"], "lab files cannot use delay:"))
	fmt.Fprintf(w, "docker        %s\n", yes(r.Docker, r.DockerErr))
	fmt.Fprintf(w, "max rate      %s (one TCP flow ≥ 90%% through a shaped hop, measured; tc BenchmarkSingleFlowMaxRate)\n", r.MaxRate)
	fmt.Fprintln(w, "\nneeds:")
	// One line per feature: the first setting that needs it, and how many
	// more do.
	var order []string
	byFeature := map[string][]need{}
	for _, n := range r.Needs {
		if byFeature[n.Feature] == nil {
			order = append(order, n.Feature)
		}
		byFeature[n.Feature] = append(byFeature[n.Feature], n)
	}
	for _, f := range order {
		ns := byFeature[f]
		more := ""
		if len(ns) > 1 {
			more = fmt.Sprintf(" (and %d more)", len(ns)-1)
		}
		status := "ok"
		if !ns[0].OK {
			status = "MISSING"
		}
		fmt.Fprintf(w, "  %-20s %-8s %s%s\n", f, status, ns[0].For, more)
		if !ns[0].OK && ns[0].Reason != "" {
			fmt.Fprintf(w, "  %-20s          %s\n", "", ns[0].Reason)
		}
	}
	for _, warn := range r.Warnings {
		fmt.Fprintf(w, "warning: %s\n", warn)
	}
}
