package experiments

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/fabric-emu/fabric/hosts/transport"
	"github.com/fabric-emu/fabric/hosts/transport/builtin"
	"github.com/fabric-emu/fabric/internal/yamlfile"
)

// TransportSpec is a scheme's `transport:`: the name of a built-in
// transport (tcp, the default; homa; ndp), or a user's {command: [...]}
// run in every host's namespace, or {image: "..."} run in every host's
// container (with `hosts: {runtime: docker}`; the image's own command,
// unless command is given too).
type TransportSpec struct {
	Builtin string   `yaml:"-" json:"builtin,omitempty"`
	Command []string `yaml:"command,omitempty" json:"command,omitempty"`
	Image   string   `yaml:"image,omitempty" json:"image,omitempty"`
}

// UnmarshalYAML accepts a name or a mapping with command and/or image.
func (t *TransportSpec) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		t.Builtin = n.Value
		return nil
	}
	type plain TransportSpec
	if err := n.Decode((*plain)(t)); err != nil {
		return err
	}
	return nil
}

// Name is how reports and logs name the transport.
func (t TransportSpec) Name() string {
	switch {
	case t.Image != "":
		return "image " + t.Image
	case len(t.Command) > 0:
		return filepath.Base(t.Command[0])
	}
	return t.builtin()
}

func (t TransportSpec) builtin() string {
	if t.Builtin == "" && t.Image == "" && len(t.Command) == 0 {
		return "tcp"
	}
	return t.Builtin
}

// IsTCP reports whether the scheme runs fabric's kernel-TCP transport,
// whose congestion control, ECN and DSCP policy are scheme fields.
func (t TransportSpec) IsTCP() bool { return t.builtin() == "tcp" }

// validate checks the transport section of a scheme (path is its field).
func (t TransportSpec) validate(path string, containers bool) error {
	switch {
	case t.Builtin != "" && (t.Image != "" || len(t.Command) > 0):
		return yamlfile.Field(path, "a built-in name or {command}/{image}, not both")
	case t.Builtin != "" && !builtin.Has(t.Builtin):
		return yamlfile.Field(path, "unknown transport %q: want one of %s, or {command: [...]} or {image: ...}", t.Builtin, strings.Join(builtin.Names(), ", "))
	case t.Image != "" && !containers:
		return yamlfile.Field(path+".image", "an image transport runs in every host's container: the lab needs hosts: {runtime: docker}")
	case len(t.Command) > 0 && t.Command[0] == "":
		return yamlfile.Field(path+".command", "the program is empty")
	}
	for i, a := range t.Command {
		if open := strings.Count(a, "{"); open > 0 {
			e := transport.Env{}
			if x := e.Expand(a); strings.Count(x, "{") == open {
				return yamlfile.Field(fmt.Sprintf("%s.command[%d]", path, i), "%q has no known placeholder; known: %s", a, strings.Join(transport.Placeholders(), " "))
			}
		}
	}
	return nil
}

// argsJSON is a scheme's args as the JSON object FABRIC_ARGS carries; for
// the built-in TCP transport, the scheme's cc, ecn and dscp fields and the
// traffic's conns come first, so that files written before transports were
// plug-ins keep meaning what they meant.
func (sc Scheme) argsJSON(t Traffic) (json.RawMessage, error) {
	args := map[string]any{}
	if sc.Transport.IsTCP() {
		if sc.CC != "" {
			args["cc"] = sc.CC
		}
		if sc.ECN != "" {
			args["ecn"] = string(sc.ECN)
		}
		if len(sc.DSCP) > 0 {
			args["dscp"] = sc.DSCP
		}
		if t.Conns > 0 {
			args["conns"] = t.Conns
		}
	}
	for k, v := range sc.Args {
		args[k] = v
	}
	return json.Marshal(args)
}
