package experiments

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/fabric-emu/fabric/hosts"
)

// bundleSrc is the experiment as its bundles carry it: one YAML file
// with the lab inline, the files it names copied in beside it and its
// paths rewritten to those copies, so that the bundle reads nothing of
// the machine it was made on.
type bundleSrc struct {
	source string
	yaml   []byte
	// copies are the files to copy, by their path in the bundle.
	copies map[string]string
	// commands are the user transports' command lines as rewritten, by
	// the command as written (joined with NULs).
	commands map[string][]string
	files    []BundleFile
}

// bundleSource reads spec's file (or built-in scenario) and makes it
// self-contained.
func bundleSource(spec *Spec) (*bundleSrc, error) {
	if name, ok := strings.CutPrefix(spec.File, builtinPrefix); ok && spec.Dir == "" {
		name = strings.TrimSuffix(name, ".yaml")
		data, err := scenarioFS.ReadFile(path.Join("scenarios", name+".yaml"))
		return &bundleSrc{source: "builtin:" + name, yaml: data}, err
	}
	if spec.Lab.Kind == 0 {
		return nil, fmt.Errorf("%s: its lab is built in Go (ParseOn), so a bundle %w: write the lab in the file", spec.Name, ErrNotBundled)
	}
	data, err := os.ReadFile(spec.Path())
	if err != nil {
		return nil, err
	}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, err
	}
	if root.Kind != yaml.DocumentNode || len(root.Content) == 0 {
		return nil, fmt.Errorf("%s: not a YAML mapping", spec.Path())
	}
	doc := root.Content[0]
	src := &bundleSrc{source: spec.Path(), copies: map[string]string{}, commands: map[string][]string{}}
	if err := src.inlineLab(spec, doc); err != nil {
		return nil, err
	}
	src.rewriteWorkloads(doc)
	src.rewriteCommands(spec, doc)
	if src.yaml, err = yaml.Marshal(&root); err != nil {
		return nil, err
	}
	return src, nil
}

// inlineLab puts a lab file's content in place of its path.
func (s *bundleSrc) inlineLab(spec *Spec, doc *yaml.Node) error {
	n := valueAt(doc, "lab")
	if n == nil || n.Kind != yaml.ScalarNode {
		return nil
	}
	p := n.Value
	if !filepath.IsAbs(p) {
		p = filepath.Join(spec.Dir, p)
	}
	data, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	var lab yaml.Node
	if err := yaml.Unmarshal(data, &lab); err != nil || len(lab.Content) == 0 {
		return fmt.Errorf("lab file %s: %v", p, err)
	}
	*n = *lab.Content[0]
	return nil
}

// rewriteWorkloads copies every workload named by a file's path into
// workloads/ and names it there, where the node looks first
// (workload.EnvDirs); its base name, and so the points' names, stay.
func (s *bundleSrc) rewriteWorkloads(doc *yaml.Node) {
	var refs []*yaml.Node
	add := func(n *yaml.Node) {
		switch {
		case n == nil:
		case n.Kind == yaml.ScalarNode:
			refs = append(refs, n)
		case n.Kind == yaml.SequenceNode:
			refs = append(refs, n.Content...)
		}
	}
	add(valueAt(doc, "traffic", "workload"))
	add(valueAt(doc, "sweep", "workload"))
	add(valueAt(doc, "quick", "sweep", "workload"))
	if classes := valueAt(doc, "traffic", "classes"); classes != nil && classes.Kind == yaml.MappingNode {
		for i := 1; i < len(classes.Content); i += 2 {
			add(valueAt(classes.Content[i], "workload"))
		}
	}
	for _, n := range refs {
		ref := n.Value
		if !strings.ContainsRune(ref, os.PathSeparator) && !strings.HasSuffix(ref, ".cdf") {
			continue // a name: built in, or on the search path
		}
		if st, err := os.Stat(ref); err != nil || st.IsDir() {
			continue
		}
		name := strings.TrimSuffix(filepath.Base(ref), ".cdf")
		s.copies[path.Join("workloads", name+".cdf")], _ = filepath.Abs(ref)
		n.Value = name
	}
}

// rewriteCommands copies a user transport's program and every argument
// that names a file of the experiment's into files/, and points the
// command at the copies.
func (s *bundleSrc) rewriteCommands(spec *Spec, doc *yaml.Node) {
	schemes := valueAt(doc, "schemes")
	if schemes == nil || schemes.Kind != yaml.MappingNode {
		return
	}
	for i := 1; i < len(schemes.Content); i += 2 {
		cmd := valueAt(schemes.Content[i], "transport", "command")
		if cmd == nil || cmd.Kind != yaml.SequenceNode {
			continue
		}
		var was, now []string
		for j, a := range cmd.Content {
			was = append(was, a.Value)
			if from := experimentFile(spec.Dir, a.Value, j == 0); from != "" {
				a.Value = s.copyIn(from)
			}
			now = append(now, a.Value)
		}
		s.commands[strings.Join(was, "\x00")] = now
	}
}

// experimentFile is the file arg names next to the experiment (dir), as
// the runner resolves a program (Spec.program) or the transport, run in
// dir, opens an argument; "" for an absolute path, a placeholder, a name
// looked up in PATH or anything that is no file.
func experimentFile(dir, arg string, program bool) string {
	if dir == "" || arg == "" || filepath.IsAbs(arg) || strings.Contains(arg, "{") {
		return ""
	}
	if program && !strings.Contains(arg, "/") {
		if st, err := os.Stat(filepath.Join(dir, arg)); err != nil || st.IsDir() {
			return "" // found in PATH, as Spec.program does
		}
	}
	p := filepath.Join(dir, arg)
	if st, err := os.Stat(p); err != nil || !st.Mode().IsRegular() {
		return ""
	}
	return p
}

// copyIn schedules from's copy into files/ and returns its path in the
// bundle (relative, so the runner resolves it next to experiment.yaml).
func (s *bundleSrc) copyIn(from string) string {
	base := filepath.Base(from)
	for k := 2; ; k++ {
		rel := path.Join("files", base)
		if have, ok := s.copies[rel]; !ok || have == from {
			s.copies[rel] = from
			return rel
		}
		base = fmt.Sprintf("%d-%s", k, filepath.Base(from))
	}
}

// transport is what runs sc's messages, and what the node must have for
// it beyond the bundle.
func (s *bundleSrc) transport(sc Scheme, lab *Spec) BundleTransport {
	tr := sc.Transport
	bt := BundleTransport{Name: tr.Name(), Image: tr.Image}
	if !hosts.IsNetNS(lab.LabSpec.Hosts.Runtime) {
		bt.Needs = append(bt.Needs, "docker (the lab's hosts are containers)")
	}
	if tr.Image != "" {
		bt.Needs = append(bt.Needs, fmt.Sprintf("the image %s in the node's docker: fabric never pulls a user's image", tr.Image))
	}
	if len(tr.Command) == 0 {
		return bt
	}
	bt.Command = tr.Command
	if now, ok := s.commands[strings.Join(tr.Command, "\x00")]; ok {
		bt.Command = now
	}
	switch prog := bt.Command[0]; {
	case strings.HasPrefix(prog, "files/"):
	case filepath.IsAbs(prog):
		bt.Needs = append(bt.Needs, prog+" on the node, at that path (an absolute path is not copied)")
	default:
		here, err := exec.LookPath(prog)
		if err != nil {
			here = "not found here either"
		}
		bt.Needs = append(bt.Needs, fmt.Sprintf("%s in the node's PATH (here: %s)", prog, here))
	}
	return bt
}

// valueAt is the node at keys under mapping n, or nil.
func valueAt(n *yaml.Node, keys ...string) *yaml.Node {
	for _, k := range keys {
		if n == nil || n.Kind != yaml.MappingNode {
			return nil
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == k {
				next = n.Content[i+1]
			}
		}
		n = next
	}
	return n
}
