package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fabric-emu/fabric/emu"
	"github.com/fabric-emu/fabric/internal/features"
)

func init() { addCommand(doctorCmd) }

func doctorCmd() *cobra.Command {
	var asJSON, calibrate bool
	c := &cobra.Command{
		Use:   "doctor [LAB.yaml...]",
		Short: "Check what this kernel and host can do, and what lab files need",
		Long: "doctor probes the kernel (qdiscs, by creating each in a throwaway namespace;\n" +
			"cls_bpf; fabric's port programs; BTF; struct_ops; congestion controls), how\n" +
			"late the idle machine lets a delay line's loop be, and\n" +
			"the Docker daemon. Given lab files, it lists the features their port settings\n" +
			"need and exits 1 when one is missing, naming the setting that needs it.\n\n" +
			"With --calibrate it measures instead what this machine's CPU pays for what a\n" +
			"trial does (a packet through a switch, a delay line's packet and wake-up, a\n" +
			"captured packet, a pacer's turn, each transport's message and packet, timer\n" +
			"lateness, steal), with small throwaway labs, in under a minute, and writes the\n" +
			"machine profile that `fabric run` plans with.",
		RunE: func(cmd *cobra.Command, args []string) error {
			if calibrate {
				return runCalibrate(cmd, asJSON)
			}
			var specs []*emu.Spec
			for _, file := range args {
				s, err := emu.Load(file) // the whole file, as `fabric up` reads it
				if err != nil {
					return err // a bad lab file: exit 2 with file:line
				}
				specs = append(specs, s)
			}
			d, err := emu.Diagnose(cmd.Context(), specs...)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				if err := enc.Encode(d); err != nil {
					return err
				}
			} else {
				printDiagnosis(cmd.OutOrStdout(), d)
			}
			if missing := d.Missing(); len(missing) > 0 {
				return exitError{code: exitFailure, msg: "missing: " + strings.Join(missing, "; ")}
			}
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	c.Flags().BoolVar(&calibrate, "calibrate", false, "measure this machine's costs into its profile (builds throwaway labs; under a minute)")
	return c
}

func printDiagnosis(w io.Writer, r *emu.Diagnosis) {
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
	for _, q := range features.Qdiscs {
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
	fmt.Fprintf(w, "delay lines   %s\n", r.DelayLines)
	fmt.Fprintf(w, "docker        %s\n", yes(r.Docker, r.DockerErr))
	fmt.Fprintf(w, "timing        %s\n", r.Timing)
	fmt.Fprintf(w, "max rate      %s (one TCP flow ≥ 90%% through a shaped hop, measured; tc BenchmarkSingleFlowMaxRate)\n", r.MaxRate)
	fmt.Fprintln(w, "\nneeds:")
	// One line per feature: the first setting that needs it, and how many
	// more do.
	var order []string
	byFeature := map[string][]emu.CheckedNeed{}
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
