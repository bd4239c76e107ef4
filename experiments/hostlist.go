package experiments

import (
	"go.yaml.in/yaml/v3"

	"github.com/fabric-emu/fabric/internal/yamlfile"
)

// HostList is one host name or a list of them.
type HostList []string

// UnmarshalYAML accepts a scalar or a sequence of scalars.
func (h *HostList) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		*h = HostList{n.Value}
		return nil
	case yaml.SequenceNode:
		var out []string
		if err := n.Decode(&out); err != nil {
			return yamlfile.LineError(n, "want a host name or a list of host names")
		}
		*h = out
		return nil
	}
	return yamlfile.LineError(n, "want a host name or a list of host names")
}

// clients and servers expand the traffic section's host lists.
func (s *Spec) clients() []string { return s.expand(s.Traffic.Client, s.Traffic.Servers) }

func (s *Spec) servers() []string { return s.expand(s.Traffic.Servers, s.Traffic.Client) }

func (s *Spec) expand(list, other HostList) []string {
	if len(list) == 1 && (list[0] == "all" || list[0] == "rest") {
		var out []string
		excl := map[string]bool{}
		if list[0] == "rest" {
			for _, h := range other {
				excl[h] = true
			}
		}
		for _, h := range s.graph.Hosts() {
			if !excl[h.Name] {
				out = append(out, h.Name)
			}
		}
		return out
	}
	return list
}
