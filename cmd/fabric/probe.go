package main

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/spf13/cobra"

	"github.com/fabric-emu/fabric/hosts/probe"
	"github.com/fabric-emu/fabric/hosts/transport"
)

func init() { addCommand(probeCmd) }

// probeCmd runs the LMM's probe stream on a host; the experiment runner
// starts it next to the scheme's transport. Hidden: people use `fabric
// run`. The old names (endpoint probe, endpoint probe-sink) still work,
// for host images built by earlier builds.
func probeCmd() *cobra.Command {
	c := &cobra.Command{
		Use:     "probe",
		Aliases: []string{"endpoint"},
		Short:   "The LMM's probe stream: a 1500-byte packet every 1 ms (HULL §5.2)",
		Hidden:  true,
	}
	c.AddCommand(probeSendCmd(), probeSinkCmd())
	return c
}

func probeSendCmd() *cobra.Command {
	var p probe.Probe
	var to, dscp string
	c := &cobra.Command{
		Use:     "send --host NAME --to ADDR",
		Aliases: []string{"probe"},
		Short:   "Send probes to a probe sink",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			a, err := netip.ParseAddr(to)
			if err != nil {
				return badInput(fmt.Errorf("--to: %w", err))
			}
			if p.DSCP, err = transport.ParseDSCP(dscp); err != nil {
				return badInput(fmt.Errorf("--dscp: %w", err))
			}
			p.To = a
			return probe.Send(cmd.Context(), p)
		},
	}
	f := c.Flags()
	f.StringVar(&p.Host, "host", "", "this host's name, carried in every probe")
	f.StringVar(&to, "to", "", "the sink's address")
	f.StringVar(&dscp, "dscp", "CS0", "the probes' code point")
	f.DurationVar(&p.Duration, "duration", 0, "how long to send (0: until stopped)")
	f.DurationVar(&p.Interval, "interval", probe.DefaultInterval, "time between probes")
	f.IntVar(&p.Size, "size", probe.DefaultSize, "IP packet size in bytes")
	f.IntVar(&p.Port, "port", probe.DefaultPort, "the sink's UDP port")
	return c
}

func probeSinkCmd() *cobra.Command {
	var host, addr, records string
	var port int
	c := &cobra.Command{
		Use:     "sink --host NAME --addr ADDR --records FILE",
		Aliases: []string{"probe-sink"},
		Short:   "Receive probes and record each one's one-way delay until SIGTERM",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			a, err := netip.ParseAddr(addr)
			if err != nil {
				return badInput(fmt.Errorf("--addr: %w", err))
			}
			w, err := transport.OpenRecords(records)
			if err != nil {
				return err
			}
			err = probe.Sink(cmd.Context(), host, a, port, w, func() { transport.Ready(cmd.OutOrStdout()) })
			return errors.Join(err, w.Close())
		},
	}
	f := c.Flags()
	f.StringVar(&host, "host", "", "this host's name")
	f.StringVar(&addr, "addr", "", "the address to listen on")
	f.StringVar(&records, "records", "", "the records file to append Probe records to")
	f.IntVar(&port, "port", probe.DefaultPort, "UDP port")
	return c
}
