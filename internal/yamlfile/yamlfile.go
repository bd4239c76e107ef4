// Package yamlfile loads the user's YAML files (labs, experiments) strictly
// and turns every problem into one line that names the file, the line and
// the field:
//
//	topo.yaml:7: topology.k: must be even, got 5
//
// Decoding rejects unknown keys. Semantic checks that run after decoding
// report a field path (FieldError); Doc.Locate turns the path back into a
// line using the parsed node tree, so validation code never handles line
// numbers itself.
package yamlfile

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Error is a user-facing problem in a file.
type Error struct {
	File  string
	Line  int    // 0 when unknown
	Field string // dotted path, "" when unknown
	Msg   string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// FieldError is a problem with one field, found after decoding. Path is
// dotted ("topology.k", "links[2].endpoints[0]"), relative to whatever the
// validating code was given; callers that nest specs prefix it with In.
type FieldError struct {
	Path string
	Err  error
}

func (e *FieldError) Error() string { return e.Path + ": " + e.Err.Error() }
func (e *FieldError) Unwrap() error { return e.Err }

// Field makes a FieldError with a formatted message.
func Field(path, format string, args ...any) error {
	return &FieldError{Path: path, Err: fmt.Errorf(format, args...)}
}

// In prefixes the path of a FieldError (if err is one) with parent, so a
// nested validator can report paths relative to its own struct.
func In(parent string, err error) error {
	var fe *FieldError
	if err == nil || !errors.As(err, &fe) {
		return err
	}
	p := fe.Path
	switch {
	case parent == "":
	case p == "":
		p = parent
	case strings.HasPrefix(p, "["):
		p = parent + p
	default:
		p = parent + "." + p
	}
	return &FieldError{Path: p, Err: fe.Err}
}

// Doc is a decoded file with its node tree kept for locating fields.
type Doc struct {
	File string
	Root *yaml.Node // the document's top mapping
}

// Load reads file and strictly decodes it into out (unknown keys are
// errors). Every error is an *Error.
func Load(file string, out any) (*Doc, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, &Error{File: file, Msg: err.Error()}
	}
	return Decode(file, data, out)
}

// Decode is Load on bytes already read; file is used in messages.
func Decode(file string, data []byte, out any) (*Doc, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, decodeError(file, nil, err)
	}
	if root.Kind != yaml.DocumentNode || len(root.Content) == 0 {
		return nil, &Error{File: file, Line: 1, Msg: "empty file"}
	}
	doc := &Doc{File: file, Root: root.Content[0]}
	if doc.Root.Kind != yaml.MappingNode {
		return nil, &Error{File: file, Line: doc.Root.Line, Msg: "the top level must be a mapping (key: value)"}
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(out); err != nil {
		return nil, decodeError(file, doc, err)
	}
	return doc, nil
}

// Wrap turns a validation error into an *Error: a FieldError is located in
// the node tree; an *Error passes through; anything else is reported
// against the file as a whole.
func (d *Doc) Wrap(err error) error {
	if err == nil {
		return nil
	}
	var ye *Error
	if errors.As(err, &ye) {
		return err
	}
	var fe *FieldError
	if errors.As(err, &fe) {
		return &Error{File: d.File, Line: d.Locate(fe.Path), Field: fe.Path, Msg: fe.Err.Error()}
	}
	return &Error{File: d.File, Msg: err.Error()}
}

// Errorf reports a problem with the field at path.
func (d *Doc) Errorf(path, format string, args ...any) error {
	return &Error{File: d.File, Line: d.Locate(path), Field: path, Msg: fmt.Sprintf(format, args...)}
}

// Locate returns the line of the field at path, or of its nearest existing
// parent, or 0.
func (d *Doc) Locate(path string) int {
	if d == nil || d.Root == nil {
		return 0
	}
	n, line := d.Root, d.Root.Line
	for _, step := range splitPath(path) {
		next, keyLine := child(n, step)
		if next == nil {
			return line
		}
		n, line = next, keyLine
	}
	return line
}

// splitPath turns `links[2].endpoints[0]` into links, [2], endpoints, [0].
func splitPath(path string) []string {
	var out []string
	for _, part := range strings.Split(path, ".") {
		for part != "" {
			i := strings.IndexByte(part, '[')
			switch {
			case i < 0:
				out = append(out, part)
				part = ""
			case i > 0:
				out = append(out, part[:i])
				part = part[i:]
			default:
				j := strings.IndexByte(part, ']')
				if j < 0 {
					out = append(out, part)
					part = ""
					break
				}
				out = append(out, part[:j+1])
				part = part[j+1:]
			}
		}
	}
	return out
}

// child finds step in n; it returns the value node and the line to report
// (the key's line for mappings, so "k: 5" points at k).
func child(n *yaml.Node, step string) (*yaml.Node, int) {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if strings.HasPrefix(step, "[") {
		i, err := strconv.Atoi(strings.Trim(step, "[]"))
		if err != nil || n.Kind != yaml.SequenceNode || i < 0 || i >= len(n.Content) {
			return nil, 0
		}
		return n.Content[i], n.Content[i].Line
	}
	if n.Kind != yaml.MappingNode {
		return nil, 0
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == step {
			return n.Content[i+1], n.Content[i].Line
		}
	}
	return nil, 0
}

var lineRE = regexp.MustCompile(`line (\d+)(?::(\d+))?: `)

// decodeError converts yaml.v3's errors ("yaml: line 3: ...", or a
// TypeError listing "line 5: field foo not found in type x") into a single
// *Error for the first problem, naming the field when it can.
func decodeError(file string, doc *Doc, err error) error {
	var ye *Error
	if errors.As(err, &ye) {
		return err
	}
	msg := err.Error()
	var te *yaml.TypeError
	if errors.As(err, &te) && len(te.Errors) > 0 {
		msg = te.Errors[0]
	}
	msg = strings.TrimPrefix(msg, "yaml: ")
	out := &Error{File: file, Msg: msg}
	if m := lineRE.FindStringSubmatchIndex(msg); m != nil {
		out.Line, _ = strconv.Atoi(msg[m[2]:m[3]])
		col := 0
		if m[4] >= 0 {
			col, _ = strconv.Atoi(msg[m[4]:m[5]])
		}
		out.Msg = msg[:m[0]] + msg[m[1]:]
		if doc != nil {
			out.Field = doc.pathAt(out.Line, col)
		}
	}
	out.Msg = tidyTypeMessage(out.Msg)
	return out
}

// tidyTypeMessage rewrites yaml.v3's Go-centric wording into the user's.
func tidyTypeMessage(msg string) string {
	if i := strings.Index(msg, " not found in type "); i >= 0 && strings.HasPrefix(msg, "field ") {
		return "unknown key " + strconv.Quote(strings.TrimPrefix(msg[:i], "field "))
	}
	if strings.HasPrefix(msg, "cannot unmarshal !!") {
		// "cannot unmarshal !!str `fast` into int" → "want a number, got "fast""
		parts := strings.SplitN(msg, "`", 3)
		if len(parts) == 3 {
			want := strings.TrimSpace(strings.TrimPrefix(parts[2], " into "))
			return fmt.Sprintf("want %s, got %q", friendlyType(want), parts[1])
		}
	}
	return msg
}

func friendlyType(goType string) string {
	switch {
	case strings.HasPrefix(goType, "int"), strings.HasPrefix(goType, "uint"):
		return "an integer"
	case strings.HasPrefix(goType, "float"):
		return "a number"
	case goType == "bool":
		return "true or false"
	case strings.HasPrefix(goType, "[]"):
		return "a list"
	case strings.HasPrefix(goType, "map["), strings.Contains(goType, "."):
		return "a mapping"
	}
	return goType
}

// pathAt finds the dotted path of the deepest key or value at line (and
// column, when known).
func (d *Doc) pathAt(line, col int) string {
	var best string
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		switch n.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				p := join(path, k.Value)
				if k.Line == line && (col == 0 || k.Column <= col) {
					best = p
				}
				if v.Line == line && (col == 0 || v.Column <= col) {
					best = p
				}
				walk(v, p)
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				p := fmt.Sprintf("%s[%d]", path, i)
				if c.Line == line && c.Kind == yaml.ScalarNode && (col == 0 || c.Column <= col) {
					best = p
				}
				walk(c, p)
			}
		}
	}
	walk(d.Root, "")
	return best
}

func join(a, b string) string {
	if a == "" {
		return b
	}
	return a + "." + b
}

// LineError is returned by custom UnmarshalYAML methods so that the loader
// can find the line (and field) of a bad scalar.
func LineError(n *yaml.Node, format string, args ...any) error {
	return fmt.Errorf("line %d:%d: %s", n.Line, n.Column, fmt.Sprintf(format, args...))
}
