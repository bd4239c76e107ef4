package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/fabric-emu/fabric/experiments"
	"github.com/fabric-emu/fabric/experiments/cost"
)

// runCalibrate is `fabric doctor --calibrate`: the machine's profile,
// measured, written to fabric's state directory and printed.
func runCalibrate(cmd *cobra.Command, asJSON bool) error {
	p, err := experiments.Calibrate(cmd.Context(), experiments.CalibrateOptions{Progress: cmd.ErrOrStderr()})
	if err != nil {
		return err
	}
	path := cost.Path()
	if err := p.Write(path); err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(cmd.OutOrStdout())
		enc.SetIndent("", "  ")
		return enc.Encode(p)
	}
	printProfile(cmd.OutOrStdout(), p, path)
	return nil
}

// printProfile prints a machine profile as a table.
func printProfile(w io.Writer, p *cost.Profile, path string) {
	c := p.Costs
	fmt.Fprintf(w, "machine profile %s\n%s, in %.0f s\n\n", path, p, p.TookS)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(what string, v float64, unit string) { fmt.Fprintf(tw, "%s\t%.2f %s\n", what, v, unit) }
	row("a packet through a switch (forwarding, HTB, eBPF marker)", c.HopUS, "µs")
	row("a packet through a delay line, besides its wake-up", c.DelayPacketUS, "µs")
	row("  of which the loop's own", c.LoopPacketUS, "µs")
	row("  of which the verdict's forwarding", c.VerdictUS, "µs")
	row("a turn of the delay loop (a wake-up or a spin)", c.DelayTurnUS, "µs")
	row("  of which the loop's own", c.LoopTurnUS, "µs")
	row("a captured packet", c.CaptureUS, "µs")
	row("a turn of a pacer's rate controller (idle bucket)", c.PacerTurnUS, "µs")
	row("a lab and fabric at rest", c.RestPct, "% of the cores")
	row("steal while calibrating", c.StealPct, "% of the cores")
	fmt.Fprintf(tw, "a trial beyond its traffic\t%.2f s + %.3f s per node\n", c.Trial.FixedS, c.Trial.NodeS)
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "transport\tper message (µs)\tper packet (µs)\tsparse packet (µs)\tper message waking its ends (µs)\tits processes: per message\tper packet\tsparse packet\twaking\t")
	names := make([]string, 0, len(c.Transports))
	for n := range c.Transports {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		t := c.Transports[n]
		fmt.Fprintf(tw, "%s\t%.1f\t%.2f\t%.2f\t+%.1f\t%.1f\t%.2f\t%.2f\t+%.1f\t\n", n, t.MessageUS, t.PacketUS, t.SparsePacketUS, t.WakeUS, t.ProcessMessageUS, t.ProcessPacketUS, t.ProcessSparsePacketUS, t.ProcessWakeUS)
	}
	tw.Flush()
	var late []string
	for _, l := range c.Lateness {
		late = append(late, fmt.Sprintf("%s: %.0f / %.0f µs", sleepText(l.SleepUS), l.P50US, l.P99US))
	}
	fmt.Fprintf(w, "\ntimer lateness after a sleep (p50 / p99): %s\n", strings.Join(late, ", "))
}

func sleepText(us float64) string {
	if us >= 1000 {
		return fmt.Sprintf("%g ms", us/1000)
	}
	return fmt.Sprintf("%g µs", us)
}
