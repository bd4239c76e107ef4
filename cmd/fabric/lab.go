package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fabric-emu/fabric/internal/netnsutil"

	"github.com/spf13/cobra"

	"github.com/fabric-emu/fabric/emu"
	"github.com/fabric-emu/fabric/tc/pacer"
)

func init() {
	addCommand(upCmd)
	addCommand(downCmd)
	addCommand(statusCmd)
	addCommand(execCmd)
	addCommand(pingallCmd)
}

func upCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "up LAB.yaml",
		Short: "Build the lab described by a lab file",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			spec, err := emu.Load(args[0])
			if err != nil {
				return badInput(err)
			}
			needsAgent, err := spec.NeedsAgent()
			if err != nil {
				return badInput(err)
			}
			if needsAgent && !emu.IsAgent() {
				if err := emu.RequireRoot(); err != nil {
					return err
				}
				upArgs := []string{"up", args[0]}
				if v, _ := cmd.Flags().GetBool("verbose"); v {
					upArgs = append(upArgs, "-v")
				}
				err := emu.UpDetached(cmd.Context(), spec.Name, upArgs, cmd.OutOrStdout(), cmd.ErrOrStderr())
				var ee *exec.ExitError
				if errors.As(err, &ee) {
					return exitError{code: ee.ExitCode()} // the agent printed why
				}
				return err
			}
			t0 := time.Now()
			lab, err := emu.Up(cmd.Context(), spec)
			if err != nil {
				return err
			}
			printUp(cmd.OutOrStdout(), lab, time.Since(t0))
			if emu.IsAgent() {
				return lab.Hold(cmd.Context())
			}
			return nil
		},
	}
}

// printUp is the summary `up` prints.
func printUp(out io.Writer, lab *emu.Lab, took time.Duration) {
	g := lab.Graph
	fmt.Fprintf(out, "lab %s up in %s: %s, %d hosts, %d switches, %d links\n",
		lab.Name, took.Round(time.Millisecond), lab.Spec.Topology, len(g.Hosts()), len(g.Switches()), len(g.Links))
	if paced := slices.Sorted(maps.Keys(lab.Pacers())); len(paced) > 0 {
		fmt.Fprintf(out, "  HULL pacer on %s, run by process %d until fabric down (log: %s)\n",
			strings.Join(paced, ","), os.Getpid(), filepath.Join(emu.LabDir(lab.Name), emu.AgentLog))
	}
	fmt.Fprintf(out, "  try: fabric pingall %s; fabric status %s; fabric down %s\n", lab.Name, lab.Name, lab.Name)
}

func downCmd() *cobra.Command {
	var all bool
	c := &cobra.Command{
		Use:   "down [LAB...]",
		Short: "Remove labs and everything they made",
		RunE: func(cmd *cobra.Command, args []string) error {
			if all == (len(args) > 0) {
				return badInput(errors.New("down: name the labs to remove, or give --all"))
			}
			if all {
				labs, err := emu.DownAll(cmd.Context())
				for _, l := range labs {
					fmt.Fprintf(cmd.OutOrStdout(), "lab %s removed\n", l)
				}
				if len(labs) == 0 && err == nil {
					fmt.Fprintln(cmd.OutOrStdout(), "nothing to remove")
				}
				return err
			}
			var errs []error
			for _, l := range args {
				t0 := time.Now()
				if err := emu.Down(cmd.Context(), l); err != nil {
					errs = append(errs, fmt.Errorf("lab %s: %w", l, err))
					continue
				}
				fmt.Fprintf(cmd.OutOrStdout(), "lab %s removed in %s\n", l, time.Since(t0).Round(time.Millisecond))
			}
			return errors.Join(errs...)
		},
	}
	c.Flags().BoolVar(&all, "all", false, "remove every lab, including leftovers of crashed runs")
	return c
}

func statusCmd() *cobra.Command {
	var asJSON, ports bool
	c := &cobra.Command{
		Use:   "status [LAB]",
		Short: "List labs, or show one lab's nodes, links and addresses",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			out := cmd.OutOrStdout()
			if len(args) == 0 {
				labs, err := emu.List()
				if err != nil {
					return err
				}
				if asJSON {
					return json.NewEncoder(out).Encode(labs)
				}
				if len(labs) == 0 {
					fmt.Fprintln(out, "no labs")
				}
				for _, l := range labs {
					st, err := emu.ReadState(l)
					if err != nil {
						fmt.Fprintf(out, "%s\t(%v)\n", l, err)
						continue
					}
					fmt.Fprintf(out, "%s\t%s\t%s\tsince %s\n", l, st.Phase, st.Spec.Topology, st.Created.Local().Format(time.DateTime))
				}
				return nil
			}
			lab, err := emu.Open(args[0])
			if err != nil {
				return err
			}
			if ports {
				return printPorts(cmd, lab, asJSON)
			}
			return printLab(out, lab, asJSON)
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "machine-readable output")
	c.Flags().BoolVar(&ports, "ports", false, "per-port settings and counters (bytes, drops, backlog, CE marks)")
	return c
}

// nodeStatus is one node in `status --json`.
type nodeStatus struct {
	Name   string        `json:"name"`
	Kind   emu.NodeKind  `json:"kind"`
	Tier   string        `json:"tier"`
	NetNS  string        `json:"netns"`
	Addr   string        `json:"addr,omitempty"`
	Ifaces []ifaceStatus `json:"ifaces"`
	Routes int           `json:"routes"`
}

type ifaceStatus struct {
	Name  string `json:"name"`
	Local string `json:"local"`
	Peer  string `json:"peer"` // node:ifname
	Rate  string `json:"rate"`
	MTU   int    `json:"mtu"`
	// Impairment is what the link does after this interface's port:
	// delay and loss.
	Impairment *emu.Impairment `json:"impairment,omitempty"`
}

func printLab(out interface{ Write([]byte) (int, error) }, lab *emu.Lab, asJSON bool) error {
	var nodes []nodeStatus
	for _, n := range lab.Graph.Nodes {
		ns := nodeStatus{Name: n.Name, Kind: n.Kind, Tier: n.Tier, NetNS: netnsutil.Path(lab.Name, n.Name), Routes: len(n.Routes)}
		if n.Kind == emu.HostNode {
			ns.Addr = n.Addr.String()
		}
		for _, i := range n.Ifaces {
			is := ifaceStatus{Name: i.Name, Local: i.Local.String(), Peer: i.Peer.Label(), Rate: i.Link.Rate.String(), MTU: i.Link.MTU}
			if w := i.Impairment(); !w.IsZero() {
				is.Impairment = &w
			}
			ns.Ifaces = append(ns.Ifaces, is)
		}
		nodes = append(nodes, ns)
	}
	agent, err := emu.ReadAgent(lab.Name)
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		doc := map[string]any{"lab": lab.Name, "topology": lab.Spec.Topology.String(), "nodes": nodes}
		if agent != nil {
			doc["agent"] = map[string]any{"pacers": agent.Pacers, "delay_lines": agent.DelayLines, "pid": agent.PID, "detached": agent.Detached, "running": agent.Alive()}
		}
		return enc.Encode(doc)
	}
	fmt.Fprintf(out, "lab %s: %s, %d hosts, %d switches, %d links\n", lab.Name, lab.Spec.Topology, len(lab.Graph.Hosts()), len(lab.Graph.Switches()), len(lab.Graph.Links))
	if agent != nil {
		printAgent(out, lab, agent)
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tKIND\tTIER\tADDRESS\tINTERFACES")
	for _, n := range nodes {
		var ifs []string
		for _, i := range n.Ifaces {
			wire := ""
			if i.Impairment != nil {
				wire = "+" + i.Impairment.String()
			}
			ifs = append(ifs, fmt.Sprintf("%s=%s→%s@%s%s", i.Name, i.Local, i.Peer, i.Rate, wire))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", n.Name, n.Kind, n.Tier, n.Addr, strings.Join(ifs, " "))
	}
	return tw.Flush()
}

func execCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "exec LAB NODE -- COMMAND [ARG...]",
		Short: "Run a command inside a node's network namespace",
		Args:  cobra.MinimumNArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			lab, err := emu.Open(args[0])
			if err != nil {
				return err
			}
			c := exec.CommandContext(cmd.Context(), args[2], args[3:]...)
			c.Stdin, c.Stdout, c.Stderr = cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr()
			// The child inherits the namespace of the thread that forks it.
			err = lab.Do(args[1], c.Run)
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				return exitError{code: ee.ExitCode(), msg: fmt.Sprintf("%s exited with %d", args[2], ee.ExitCode())}
			}
			return err
		},
	}
}

func pingallCmd() *cobra.Command {
	var timeout time.Duration
	c := &cobra.Command{
		Use:   "pingall LAB",
		Short: "Ping every host from every host; exit 1 on any loss",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			lab, err := emu.Open(args[0])
			if err != nil {
				return err
			}
			t0 := time.Now()
			res, err := lab.PingAll(cmd.Context(), timeout)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			for _, s := range res.Hosts {
				var row []string
				for _, d := range res.Hosts {
					switch {
					case s == d:
					case res.Reached[s][d]:
						row = append(row, d)
					default:
						row = append(row, "X")
					}
				}
				fmt.Fprintf(out, "%s -> %s\n", s, strings.Join(row, " "))
			}
			lost := res.Sent - res.Received
			fmt.Fprintf(out, "*** Results: %d%% dropped (%d/%d received) in %s\n", 100*lost/max(res.Sent, 1), res.Received, res.Sent, time.Since(t0).Round(time.Millisecond))
			if lost > 0 {
				return exitError{code: exitFailure, msg: fmt.Sprintf("pingall: %d of %d pings lost: %s", lost, res.Sent, strings.Join(firstN(res.Lost(), 10), ", "))}
			}
			return nil
		},
	}
	c.Flags().DurationVar(&timeout, "timeout", time.Second, "wait per round for replies")
	return c
}

func firstN(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], "…")
	}
	return s
}

// printAgent says which process runs the lab's pacers and delay lines,
// and what a dead one means.
func printAgent(out io.Writer, lab *emu.Lab, agent *emu.Agent) {
	alive := agent.Alive()
	if agent.DelayLines {
		state := "running"
		if !alive {
			state = "GONE: delayed links carry no traffic until the lab is rebuilt"
		}
		fmt.Fprintf(out, "delay lines: process %d (%s)\n", agent.PID, state)
	}
	if len(agent.Pacers) == 0 {
		return
	}
	state := "running"
	if !alive {
		state = "GONE: the hosts' pacers are not being updated"
	}
	fmt.Fprintf(out, "HULL pacers on %s, process %d (%s)\n", strings.Join(agent.Pacers, ","), agent.PID, state)
	for _, h := range agent.Pacers {
		if n := lab.Graph.Node(h); n != nil && len(n.Ifaces) > 0 {
			if b, ok, err := pacer.ReadBucket(netnsutil.Path(lab.Name, h), n.Ifaces[0].Name); err == nil && ok {
				fmt.Fprintf(out, "  %s bucket: R %.1f Mbit/s, %d B queued\n", h, float64(b.Rate)/1e6, b.Backlog)
			}
		}
	}
}
