package report

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/fabric-emu/fabric/internal/machine"
)

// Machine is the machine a trial ran on (meta.json's machine; on a
// cluster, the scheduler's node): its host name, what it is, its kernel
// and, when one stood for it, its calibrated profile as experiments/cost
// writes it.
type Machine struct {
	Name    string          `json:"name"`
	Machine machine.Machine `json:"machine"`
	Kernel  string          `json:"kernel"`
	Profile json.RawMessage `json:"profile,omitempty"`
}

// Kind is what makes two machines' trials comparable: the CPU model, its
// cores and the kernel (a profile's identity less the build).
func (n *Machine) Kind() string {
	if n == nil {
		return ""
	}
	return fmt.Sprintf("%d × %s, kernel %s", n.Machine.CPUs, n.Machine.Model, n.Kernel)
}

// machinesSection lists the machines the trials ran on and flags every set
// of sweep values whose schemes ran on machines of different kinds: their
// rows compare the machines as well as the schemes.
func machinesSection(b *strings.Builder, trials []*TrialSummary) {
	type seen struct {
		node   *Machine
		trials int
	}
	var names []string
	byName := map[string]*seen{}
	for _, t := range trials {
		if t.Machine == nil {
			continue
		}
		s, ok := byName[t.Machine.Name]
		if !ok {
			s = &seen{node: t.Machine}
			byName[t.Machine.Name] = s
			names = append(names, t.Machine.Name)
		}
		s.trials++
	}
	if len(names) == 0 {
		return
	}
	b.WriteString("\n## Machines\n\n| machine | what it is | kernel | trials |\n|---|---|---|---:|\n")
	for _, n := range names {
		s := byName[n]
		fmt.Fprintf(b, "| %s | %s | %s | %d |\n", n, s.node.Machine, s.node.Kernel, s.trials)
	}
	for _, m := range MixedPoints(trials) {
		fmt.Fprintf(b, "\n**Flagged:** %s\n", m)
	}
}

// MixedPoints says, for each set of sweep values whose trials ran on
// machines of more than one kind (Machine.Kind), which schemes ran where.
func MixedPoints(trials []*TrialSummary) []string {
	var keys []string
	kinds := map[string]map[string][]string{} // sweep values → kind → schemes
	for _, t := range trials {
		if t.Machine == nil {
			continue
		}
		k := sweepText(t.Sweep)
		if kinds[k] == nil {
			kinds[k] = map[string][]string{}
			keys = append(keys, k)
		}
		name := t.SchemeName
		if name == "" {
			name = t.Scheme
		}
		if !slices.Contains(kinds[k][t.Machine.Kind()], name) {
			kinds[k][t.Machine.Kind()] = append(kinds[k][t.Machine.Kind()], name)
		}
	}
	var out []string
	for _, k := range keys {
		if len(kinds[k]) < 2 {
			continue
		}
		var parts []string
		for kind, schemes := range kinds[k] {
			parts = append(parts, fmt.Sprintf("%s on %s", strings.Join(schemes, ", "), kind))
		}
		slices.Sort(parts)
		out = append(out, fmt.Sprintf("at %s the trials ran on machines of different kinds (%s): its rows compare the machines as well as the schemes.",
			k, strings.Join(parts, "; ")))
	}
	return out
}

// sweepText names a set of sweep values: "load=40%, senders=4", or "the
// only point" when nothing but the scheme is swept.
func sweepText(sweep []SweepValue) string {
	if len(sweep) == 0 {
		return "the sweep's one set of values"
	}
	parts := make([]string, len(sweep))
	for i, v := range sweep {
		parts[i] = v.Key + "=" + v.Value
	}
	return strings.Join(parts, ", ")
}
