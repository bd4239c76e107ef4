package main

import (
	"context"
	"encoding/json"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/fabric-emu/fabric/emu"
	"github.com/fabric-emu/fabric/tc"
)

// portStatus is one port in `status --ports --json`.
type portStatus struct {
	Port     string       `json:"port"`
	Kind     emu.NodeKind `json:"kind"`
	Settings tc.Port      `json:"settings"`
	Counters tc.PortStats `json:"counters"`
}

// readPorts reads every port of a running lab: its settings and counters.
func readPorts(ctx context.Context, lab *emu.Lab) ([]portStatus, error) {
	ports, err := lab.Ports()
	if err != nil {
		return nil, err
	}
	var rows []portStatus
	for _, p := range ports {
		st, err := tc.Stats(ctx, p.Target)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.Iface.Label(), err)
		}
		rows = append(rows, portStatus{Port: p.Iface.Label(), Kind: p.Iface.Node.Kind, Settings: p.Port, Counters: st})
	}
	return rows, nil
}

func printPorts(cmd *cobra.Command, lab *emu.Lab, asJSON bool) error {
	rows, err := readPorts(cmd.Context(), lab)
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	if asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "PORT\tRATE\tBUFFER\tBANDS\tMARKING\tPACKETS\tBYTES\tDROPS\tBACKLOG\tECN MARKS\tPQ MARKS\t")
	for _, r := range rows {
		s, c := r.Settings, r.Counters
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d\t%d\t%d\t%d\t%s\t%s\t\n", r.Port, s.Rate, s.Buffer, s.Bands, marking(s),
			c.Packets, c.Bytes, c.Drops, c.Backlog, marks(c.ECN), marks(c.Phantom))
	}
	return tw.Flush()
}

func marking(p tc.Port) string {
	switch {
	case p.ECN != nil:
		return "ecn K=" + p.ECN.Threshold.String()
	case p.Phantom != nil:
		return fmt.Sprintf("pq %.2f/%s", p.Phantom.Drain, p.Phantom.Threshold)
	}
	return "-"
}

func marks(m *tc.MarkerStats) string {
	if m == nil {
		return "-"
	}
	return fmt.Sprint(m.Marks)
}
