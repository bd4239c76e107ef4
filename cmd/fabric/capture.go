package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/fabric-emu/fabric/internal/netnsutil"

	"github.com/spf13/cobra"

	"github.com/fabric-emu/fabric/emu"
	"github.com/fabric-emu/fabric/results/capture"
)

func init() { addCommand(captureCmd) }

func captureCmd() *cobra.Command {
	var dir string
	var snaplen uint32
	var duration time.Duration
	c := &cobra.Command{
		Use:   "capture LAB NODE:IFNAME[:in|out]... -w DIR",
		Short: "Capture packets on lab ports into nanosecond pcap files (Ctrl-C to stop)",
		Args:  cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if dir == "" {
				return badInput(errors.New("capture: -w DIR is required"))
			}
			lab, err := emu.Open(args[0])
			if err != nil {
				return err
			}
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			nsPath := func(node string) string { return netnsutil.Path(lab.Name, node) }
			for _, spec := range args[1:] {
				p, _, err := capture.ParsePoint(spec, nsPath)
				if err != nil {
					return badInput(err)
				}
				node, _, _ := strings.Cut(p.Label, ":")
				if _, err := lab.PortTarget(node, p.Ifname); err != nil {
					return badInput(err)
				}
			}
			g, err := capture.StartPoints(cmd.Context(), args[1:], nsPath, dir, capture.Options{Snaplen: snaplen})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "capturing %d ports into %s; Ctrl-C to stop\n", len(args)-1, dir)
			if duration > 0 {
				select {
				case <-time.After(duration):
				case <-cmd.Context().Done():
				}
			} else {
				<-cmd.Context().Done()
			}
			stats, err := g.Stop()
			for _, st := range stats {
				warn := ""
				if st.Drops > 0 {
					warn = "  CAPTURE DROPPED PACKETS: results from this file are incomplete"
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s: %d packets written to %s, %d dropped%s\n", st.Label, st.Written, st.File, st.Drops, warn)
			}
			return err
		},
	}
	c.Flags().StringVarP(&dir, "write", "w", "", "directory for the pcap files")
	c.Flags().Uint32Var(&snaplen, "snaplen", capture.DefaultSnaplen, "bytes kept per packet (headers only by default)")
	c.Flags().DurationVar(&duration, "duration", 0, "stop after this long (default: until Ctrl-C)")
	return c
}
