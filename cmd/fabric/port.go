package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fabric-emu/fabric/emu"
	"github.com/fabric-emu/fabric/internal/yamlfile"
	"github.com/fabric-emu/fabric/tc"
)

func init() { addCommand(portCmd) }

func portCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "port",
		Short: "Inspect and retune one port of a running lab",
	}
	c.AddCommand(portSetCmd(), portShowCmd())
	return c
}

func portSetCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "set LAB NODE:IFNAME KEY=VALUE...",
		Short: "Change port settings live, without touching the links",
		Long: "Change settings of a running port. Marker parameters are rewritten in the lab's\n" +
			"BPF maps (the next packet sees them); rate and buffer are changed in place on\n" +
			"the HTB classes and fifos. Settable keys: " + strings.Join(tc.SettableKeys, ", ") + ".",
		Example: "  fabric port set lab1 s0:eth1 marking.phantom.drain=0.9\n" +
			"  fabric port set lab1 s0:eth1 rate=500Mbit marking.ecn.threshold=15KB",
		Args: cobra.MinimumNArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			target, err := portTarget(args[0], args[1])
			if err != nil {
				return err
			}
			for _, kv := range args[2:] {
				key, value, ok := strings.Cut(kv, "=")
				if !ok || key == "" {
					return badInput(fmt.Errorf("%q: want KEY=VALUE, e.g. marking.phantom.drain=0.9", kv))
				}
				if err := tc.Set(cmd.Context(), target, key, value); err != nil {
					var fe *yamlfile.FieldError
					if errors.As(err, &fe) {
						return badInput(fmt.Errorf("%s %s: %w", args[0], args[1], err))
					}
					return fmt.Errorf("%s %s: %w", args[0], args[1], err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s %s: %s = %s\n", args[0], args[1], key, value)
			}
			return nil
		},
	}
}

func portShowCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "show LAB NODE:IFNAME",
		Short: "Counters of one port: packets, drops, backlog, CE marks, marker queues",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			target, err := portTarget(args[0], args[1])
			if err != nil {
				return err
			}
			st, err := tc.Stats(cmd.Context(), target)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(st)
			}
			fmt.Fprintf(out, "%s  sent %d packets %d bytes  dropped %d  backlog %d bytes (%d packets)\n",
				st.Port, st.Packets, st.Bytes, st.Drops, st.Backlog, st.QueuedPkt)
			for _, b := range st.Bands {
				fmt.Fprintf(out, "  band %d  sent %d packets  dropped %d  backlog %d bytes\n", b.Band, b.Packets, b.Drops, b.Backlog)
			}
			for _, m := range []struct {
				name string
				s    *tc.MarkerStats
			}{{"ecn", st.ECN}, {"phantom", st.Phantom}} {
				if m.s != nil {
					fmt.Fprintf(out, "  %s  threshold %d B  queue %d B (max %d)  marked %d of %d packets (%d ECT)\n",
						m.name, m.s.Threshold, m.s.VQ, m.s.VQMax, m.s.Marks, m.s.Packets, m.s.ECT)
				}
			}
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

// portTarget finds NODE:IFNAME of a running lab; a name that does not
// resolve is the user's mistake (exit 2).
func portTarget(lab, port string) (tc.Target, error) {
	node, ifname, ok := strings.Cut(port, ":")
	if !ok || node == "" || ifname == "" {
		return tc.Target{}, badInput(fmt.Errorf("port %q: want NODE:IFNAME, e.g. s0:eth1", port))
	}
	l, err := emu.Open(lab)
	if err != nil {
		return tc.Target{}, err
	}
	t, err := l.PortTarget(node, ifname)
	if err != nil {
		return tc.Target{}, badInput(err)
	}
	return t, nil
}
