package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/fabric-emu/fabric/emu"
	"github.com/fabric-emu/fabric/results/plot"
	"github.com/fabric-emu/fabric/tc"
)

func init() { addCommand(graphCmd) }

// graphCmd is `fabric graph LAB_OR_FILE`: a picture of a topology.
func graphCmd() *cobra.Command {
	var out string
	c := &cobra.Command{
		Use:   "graph LAB_OR_FILE",
		Short: "Draw a lab's topology as an SVG and a PNG",
		Long: `Draw the topology of a lab file, or of a running lab by name: nodes in
rows by tier (hosts at the bottom), links with their rate and delay, and
for a running lab the drops and marks of every port that has any.`,
		Example: `  fabric graph examples/fattree-k4.yaml -o ft4     # ft4.svg, ft4.png
  fabric graph ft4                                  # a running lab, with its ports' counters`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			g, title, ports, err := graphSource(cmd, args[0])
			if err != nil {
				return err
			}
			if out == "" {
				out = g.Lab
			}
			if err := plot.Topology(out, g, title, ports); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s.svg and %s.png\n", out, out)
			return nil
		},
	}
	c.Flags().StringVarP(&out, "out", "o", "", "write OUT.svg and OUT.png (default: the lab's name)")
	return c
}

// graphSource resolves a lab file, or opens a running lab and reads its
// ports' counters.
func graphSource(cmd *cobra.Command, arg string) (*emu.Graph, string, map[string]plot.PortCounters, error) {
	if st, err := os.Stat(arg); err == nil && !st.IsDir() {
		spec, err := emu.Load(arg)
		if err != nil {
			return nil, "", nil, badInput(err)
		}
		g, err := spec.Resolve()
		if err != nil {
			return nil, "", nil, badInput(err)
		}
		return g, fmt.Sprintf("%s (%s): %s", g.Lab, filepath.Base(arg), counts(g, spec)), nil, nil
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, "", nil, err
	}
	lab, err := emu.Open(arg)
	if err != nil {
		return nil, "", nil, badInput(fmt.Errorf("%s: neither a lab file nor a running lab: %w", arg, err))
	}
	rows, err := readPorts(cmd.Context(), lab)
	if err != nil {
		return nil, "", nil, err
	}
	ports := map[string]plot.PortCounters{}
	for _, r := range rows {
		c := plot.PortCounters{Drops: r.Counters.Drops}
		for _, m := range []*tc.MarkerStats{r.Counters.ECN, r.Counters.Phantom} {
			if m != nil {
				c.Marks += m.Marks
			}
		}
		ports[r.Port] = c
	}
	return lab.Graph, fmt.Sprintf("lab %s (running): %s; drops and marks of each port that has any", lab.Name, counts(lab.Graph, lab.Spec)), ports, nil
}

// counts is a topology's kind and size, as `fabric up` prints them.
func counts(g *emu.Graph, spec *emu.Spec) string {
	return fmt.Sprintf("%s, %d hosts, %d switches, %d links", spec.Topology, len(g.Hosts()), len(g.Switches()), len(g.Links))
}
