package experiments

import (
	"errors"
	"os"
	"path/filepath"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/fabric-emu/fabric/emu"
	"github.com/fabric-emu/fabric/hosts/cc"
	"github.com/fabric-emu/fabric/internal/yamlfile"
)

// Load reads and validates an experiment file.
func Load(file string) (*Spec, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, &yamlfile.Error{File: file, Msg: err.Error()}
	}
	return Parse(file, data, "")
}

// Parse validates an experiment held in data. labDir is where a `lab:`
// path is resolved ("" means relative to file's directory on disk).
// Everything that could fail for bad input fails here, with file:line.
func Parse(file string, data []byte, labDir string) (*Spec, error) {
	return parse(file, data, labDir, nil)
}

// ParseOn validates an experiment, held in data without a `lab:` section,
// to be run on a lab built in Go:
//
//	lab := emu.NewCustom("two").AddSwitch("s1").AddHost("h1").AddHost("h2").
//		AddLink("h1", "s1").AddLink("h2", "s1")
//	spec, err := experiments.ParseOn("mine.yaml", yamlBytes, lab)
func ParseOn(file string, data []byte, lab *emu.Spec) (*Spec, error) {
	if lab == nil {
		return nil, &yamlfile.Error{File: file, Msg: "ParseOn needs a lab"}
	}
	if err := lab.Validate(); err != nil {
		return nil, err
	}
	return parse(file, data, "", lab)
}

func parse(file string, data []byte, labDir string, lab *emu.Spec) (*Spec, error) {
	var s Spec
	doc, err := yamlfile.Decode(file, data, &s)
	if err != nil {
		return nil, err
	}
	s.File, s.doc = file, doc
	if s.Dir, err = filepath.Abs(filepath.Dir(file)); err != nil {
		return nil, &yamlfile.Error{File: file, Msg: err.Error()}
	}
	if lab != nil {
		if s.Lab.Kind != 0 {
			return nil, doc.Errorf("lab", "the lab is given in Go (ParseOn); leave it out of the file")
		}
		s.LabSpec = lab
	}
	if err := s.resolveLab(doc, labDir); err != nil {
		return nil, err
	}
	s.SchemeOrder = mappingKeys(doc.Root, "schemes")
	s.ClassOrder = mappingKeysAt(doc.Root, "traffic", "classes")
	if s.Scale.PaperScale() { // validated as it will run: scaled
		return s.checkScaled()
	}
	if err := s.validate(); err != nil {
		return nil, doc.Wrap(err)
	}
	return &s, nil
}

// resolveLab loads `lab:`: a path (relative to the experiment file) or an
// inline lab, whose errors are placed at their line in this file.
func (s *Spec) resolveLab(doc *yamlfile.Doc, labDir string) error {
	n := &s.Lab
	switch {
	case s.LabSpec != nil: // given in Go
	case n.Kind == 0:
		return doc.Errorf("lab", "is required: a lab file path or an inline lab (name, topology, ...)")
	case n.Kind == yaml.ScalarNode:
		p := n.Value
		if !filepath.IsAbs(p) {
			if labDir == "" {
				labDir = s.Dir
			}
			p = filepath.Join(labDir, p)
		}
		spec, err := s.loadLab(p)
		if err != nil {
			var ye *yamlfile.Error
			if errors.As(err, &ye) && ye.Line == 0 {
				return doc.Errorf("lab", "%v", err)
			}
			return err
		}
		s.LabSpec = spec
	case n.Kind == yaml.MappingNode:
		// Decode the inline lab as a lab file of its own, then move any
		// error back to its line here: the re-encoded text keeps the
		// structure, so the field path locates it.
		b, err := yaml.Marshal(n)
		if err != nil {
			return doc.Errorf("lab", "%v", err)
		}
		spec, err := s.parseLab(s.File+" (lab)", b)
		if err != nil {
			var ye *yamlfile.Error
			if errors.As(err, &ye) {
				path := "lab"
				if ye.Field != "" {
					path += "." + ye.Field
				}
				return doc.Errorf(path, "%s", ye.Msg)
			}
			return doc.Errorf("lab", "%v", err)
		}
		spec.File = s.File
		s.LabSpec = spec
	default:
		return doc.Errorf("lab", "want a lab file path or an inline lab mapping")
	}
	if s.Scale.PaperScale() {
		return nil // resolved scaled, by checkScaled
	}
	g, err := s.LabSpec.Resolve()
	if err != nil {
		return doc.Errorf("lab", "%v", err)
	}
	s.graph = g
	return nil
}

// loadLab reads a lab file: checked, or for an experiment written at the
// paper's scale decoded only, since only its scaled copy can run
// (checkScaled).
func (s *Spec) loadLab(path string) (*emu.Spec, error) {
	if !s.Scale.PaperScale() {
		return emu.Load(path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &yamlfile.Error{File: path, Msg: err.Error()}
	}
	return emu.Decode(path, data)
}

// parseLab is loadLab for an inline lab's text.
func (s *Spec) parseLab(file string, data []byte) (*emu.Spec, error) {
	if !s.Scale.PaperScale() {
		return emu.Parse(file, data)
	}
	return emu.Decode(file, data)
}

// mappingKeys lists the keys of the mapping at key in root, in file order.
func mappingKeys(root *yaml.Node, key string) []string {
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value == key && root.Content[i+1].Kind == yaml.MappingNode {
			var out []string
			m := root.Content[i+1]
			for j := 0; j+1 < len(m.Content); j += 2 {
				out = append(out, m.Content[j].Value)
			}
			return out
		}
	}
	return nil
}

// delayed reports whether any of the run's labs has delay lines: the lab
// of every scheme at every swept delay (a search's probes change only the
// rate, which adds or removes no line).
func (s *Spec) delayed() bool {
	delays := []time.Duration{0}
	for _, d := range s.Sweep.Delay {
		delays = append(delays, time.Duration(d))
	}
	for _, sc := range s.Schemes {
		for _, d := range delays {
			if s.labFor(sc, Point{Delay: d}, "").HasDelayLines() {
				return true
			}
		}
	}
	return false
}

// labFor is the lab spec of point p: the scheme's port and link settings
// merged over the lab's, a swept delay on every link, named name. A
// scaled spec (scaledBy) scales the point's delay and rate, which name
// the point as written.
func (s *Spec) labFor(sc Scheme, p Point, name string) *emu.Spec {
	base := s.LabSpec.WithImpairments(sc.Links)
	if len(s.Sweep.Delay) > 0 {
		base = base.WithDelay(emu.ScaleTime(p.Delay, s.pointScale()))
	}
	if p.Rate > 0 {
		base = base.WithRate(emu.ScaleRate(p.Rate, s.pointScale()))
	}
	l := *base
	l.Name = name
	l.Ports = s.LabSpec.Ports.Merge(sc.Ports)
	// The scheme's congestion control is also every host's default, so
	// that listening sockets have it too: Linux accepts ECN on an ECT SYN
	// (DCTCP sends its SYN as ECT) only when the listener's congestion
	// control needs ECN (tcp_ecn_create_request), and the endpoints set
	// their congestion control per connection, after the handshake.
	sys := map[string]string{}
	for k, v := range s.LabSpec.Hosts.Sysctls {
		sys[k] = v
	}
	// Only for those: outside the initial namespace Linux lets the default
	// be set only to a congestion control in tcp_allowed_congestion_control.
	if cc.NeedsECN(sc.CC) {
		sys["net.ipv4.tcp_congestion_control"] = sc.CC
	}
	l.Hosts.Sysctls = sys
	// The scheme decides where pacers run (on the data senders, see
	// trial); the lab file's pacer sections only give their parameters.
	l.Hosts = l.Hosts.WithoutPacing()
	if sc.Transport.Image != "" { // the transport's image is every host's, held for it
		l.Hosts.Image, l.Hosts.Hold = sc.Transport.Image, true
	}
	return &l
}

// WithQuick returns the spec with its quick variant applied.
func (s *Spec) WithQuick() *Spec {
	c := *s
	c.IsQuick, c.Reruns = true, 0
	if q := s.Quick; q != nil {
		c.Reruns = q.Reruns
		if q.Duration > 0 {
			c.Duration = q.Duration
		}
		if q.Trials > 0 {
			c.Trials = q.Trials
		}
		if q.Sweep != nil {
			c.Sweep = *q.Sweep
		}
		if q.Search != nil {
			c.Search = q.Search
		}
		if q.Scale != nil {
			c.Scale = q.Scale
		}
		if q.Seed > 0 {
			c.Seed = q.Seed
		}
	}
	return &c
}

// FileError is what Load, Parse and ParseOn return for a bad experiment
// file (or the lab file it names): file, line, field and the problem.
// Match it with errors.As.
type FileError = emu.FileError

// Path is the experiment file as run.json and meta.json record it:
// absolute when it is on disk, so a run resumes from any directory.
func (s *Spec) Path() string {
	if s.Dir == "" || filepath.IsAbs(s.File) {
		return s.File
	}
	return filepath.Join(s.Dir, filepath.Base(s.File))
}
