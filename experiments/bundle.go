package experiments

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fabric-emu/fabric/emu"
	"github.com/fabric-emu/fabric/experiments/cost"
)

// A trial bundle is one trial of a sweep in a directory of its own, from
// which `fabric trial` runs it on any machine with the same fabric build:
//
//	DIR/index.json                    the sweep: its bundles by index
//	DIR/NNNN-POINT-trial-N/
//	  bundle.json                     point, trial, seeds, scale, the resolved lab and scheme, the transport
//	  run.json                        the run's run.json as fabric run would start it (spec, seed, points, plan)
//	  experiment.yaml                 the experiment, its lab inline and its files' paths the bundle's own
//	  files/  workloads/              a user transport's program and files, workload files
//	  schedule/schedule-HOST.jsonl    the trial's schedule, as its transports will read it
//
// The trial runs through the runner exactly as under fabric run
// (runner.settleTrial), and checks first that it draws the bundle's
// schedule byte for byte.

// BundleFormat is bundle.json's format; a node refuses another.
const BundleFormat = 1

// Bundle is bundle.json.
type Bundle struct {
	Format     int    `json:"format"`
	Experiment string `json:"experiment"`
	// Source is the experiment file the sweep was bundled from, or
	// builtin:NAME for a built-in scenario.
	Source string `json:"source"`
	Quick  bool   `json:"quick"`
	// ScaleFlag is fabric run's --scale, applied again on the node.
	ScaleFlag string `json:"scale_flag,omitempty"`
	// Seed is the run's base seed and TrialSeed the trial's (TrialSeed).
	Seed      uint64 `json:"seed"`
	TrialSeed uint64 `json:"trial_seed"`
	// Index is the bundle's place in its sweep: the array task that runs it.
	Index int   `json:"index"`
	Point Point `json:"point"`
	Trial int   `json:"trial"`
	// Scale is the s the point runs at (0: the file states none).
	Scale  float64 `json:"scale,omitempty"`
	Fabric Version `json:"fabric"`
	// Lab is the lab the trial builds (the scheme's settings merged in,
	// scaled) and Scheme the scheme as it runs.
	Lab       *emu.Spec       `json:"lab"`
	Scheme    Scheme          `json:"scheme"`
	Transport BundleTransport `json:"transport"`
	// Schedule and Files are the bundle's files with their digests.
	Schedule []BundleFile `json:"schedule"`
	Files    []BundleFile `json:"files,omitempty"`
	Created  time.Time    `json:"created"`
}

// BundleTransport is what runs the scheme's messages: a built-in, or a
// user's command (its program copied in when it is a file of the
// experiment's) or image, and what the node must have besides the bundle.
type BundleTransport struct {
	Name    string   `json:"name"`
	Command []string `json:"command,omitempty"`
	Image   string   `json:"image,omitempty"`
	Needs   []string `json:"needs,omitempty"`
}

// BundleFile is a file of a bundle, by its path in the bundle.
type BundleFile struct {
	Path   string `json:"path"`
	SHA256 string `json:"sha256"`
	// From is where a copied file came from.
	From string `json:"from,omitempty"`
}

// BundleIndex is index.json: every bundle of a sweep, by index.
type BundleIndex struct {
	Experiment string      `json:"experiment"`
	Quick      bool        `json:"quick"`
	Seed       uint64      `json:"seed"`
	Fabric     Version     `json:"fabric"`
	Bundles    []BundleRef `json:"bundles"`
}

// BundleRef is one bundle of an index.
type BundleRef struct {
	Index int    `json:"index"`
	Point string `json:"point"`
	Trial int    `json:"trial"`
	Dir   string `json:"dir"` // relative to the index's directory
}

// BundleOptions tune WriteBundles.
type BundleOptions struct {
	// Dir receives the bundles; it must not exist, or be empty.
	Dir string
	// Seed is the base seed (0: the file's, else the clock's).
	Seed uint64
	// Profile plans the sweep (a point's s under scale auto, the
	// predictions); nil takes the state directory's when it stands.
	// Bundling never measures the machine.
	Profile *cost.Profile
	// ScaleFlag is fabric run's --scale, already applied to the spec.
	ScaleFlag string
}

// Bundle file and directory names.
const (
	bundleFileName = "bundle.json"
	indexFileName  = "index.json"
	bundleSpecName = "experiment.yaml"
	scheduleDir    = "schedule"
)

// sharedFiles are what every bundle of a sweep carries alike.
var sharedFiles = []string{bundleSpecName, "files", "workloads"}

// ErrNotBundled is a spec that cannot be cut into independent trials.
var ErrNotBundled = errors.New("cannot be bundled")

// WriteBundles writes one bundle per trial of spec's sweep into
// opts.Dir and its index, building no lab. On an error it removes what it
// wrote.
func WriteBundles(ctx context.Context, spec *Spec, opts BundleOptions) (idx *BundleIndex, err error) {
	if spec.Search != nil {
		return nil, fmt.Errorf("%s: a capacity search picks each step from the last one's verdict, so its trials %w; run it with fabric run", spec.Name, ErrNotBundled)
	}
	if err := claimEmptyDir(opts.Dir); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(opts.Dir)
		}
	}()
	rf, err := bundleRunFile(spec, opts)
	if err != nil {
		return nil, err
	}
	src, err := bundleSource(spec)
	if err != nil {
		return nil, err
	}
	w := &bundleWriter{spec: spec, opts: opts, run: rf, src: src, schedules: map[string]string{}}
	idx = &BundleIndex{Experiment: spec.Name, Quick: spec.IsQuick, Seed: rf.Seed, Fabric: rf.Fabric}
	for _, p := range spec.Points() {
		for n := 1; n <= spec.Trials; n++ {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			ref, err := w.write(p, n, len(idx.Bundles))
			if err != nil {
				return nil, fmt.Errorf("bundle of %s trial %d: %w", p.Name, n, err)
			}
			idx.Bundles = append(idx.Bundles, ref)
		}
	}
	return idx, writeJSON(filepath.Join(opts.Dir, indexFileName), idx)
}

// ErrDirInUse is why a directory that is not empty cannot take bundles:
// bad input, not a failure.
var ErrDirInUse = errors.New("not empty")

// claimEmptyDir makes dir, which may exist only empty.
func claimEmptyDir(dir string) error {
	if dir == "" {
		return errors.New("no bundle directory")
	}
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return fmt.Errorf("%s is %w: bundles go into a directory of their own", dir, ErrDirInUse)
	}
	return os.MkdirAll(dir, 0o755)
}

// bundleRunFile is the run.json a sweep's bundles share: fabric run's,
// without the machine (each node writes its own), with the plan when a
// profile stands.
func bundleRunFile(spec *Spec, opts BundleOptions) (*RunFile, error) {
	specJSON, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	rf := &RunFile{
		Name: spec.Name, File: spec.Path(), Quick: spec.IsQuick, Seed: baseSeed(spec, opts.Seed), Started: time.Now().UTC(),
		Points: spec.Points(), Trials: spec.Trials, Duration: spec.Duration.String(), Paper: spec.Paper,
		Fabric: BuildVersion(), Spec: specJSON,
	}
	p := opts.Profile
	if p == nil {
		p = standingProfile()
	}
	if p == nil {
		if spec.Scale != nil && spec.Scale.Auto {
			return nil, fmt.Errorf("scale auto picks each point's s from this machine's profile, and none stands: " +
				"fabric doctor --calibrate measures one, or --profile FILE gives one")
		}
		return rf, nil
	}
	if rf.Plan, err = spec.Plan(PlanOptions{Profile: p, Seed: rf.Seed}); err != nil {
		return nil, err
	}
	return rf, nil
}

// baseSeed is the run's base seed: the option's, the file's, else the
// clock's.
func baseSeed(spec *Spec, seed uint64) uint64 {
	if seed == 0 {
		seed = spec.Seed
	}
	if seed == 0 {
		seed = uint64(time.Now().UnixNano()%1_000_000_000) + 1
	}
	return seed
}

// bundleWriter writes a sweep's bundles; a schedule shared by several
// (every scheme of a trial carries the same messages) is written once
// and linked.
type bundleWriter struct {
	spec      *Spec
	opts      BundleOptions
	run       *RunFile
	src       *bundleSrc
	first     string            // the first bundle's directory, whose shared files the others link
	schedules map[string]string // traffic, seed and s → the bundle holding that schedule
}

// write writes the bundle of trial n of p as bundle index i.
func (w *bundleWriter) write(p Point, n, i int) (BundleRef, error) {
	rel := fmt.Sprintf("%04d-%s-trial-%d", i, p.Name, n)
	dir := filepath.Join(w.opts.Dir, rel)
	r := (&runner{spec: w.spec, run: w.run}).at(p)
	sp := r.spec
	sc := sp.schemeAt(p)
	b := &Bundle{Format: BundleFormat, Experiment: w.spec.Name, Source: w.src.source, Quick: w.spec.IsQuick, ScaleFlag: w.opts.ScaleFlag,
		Seed: w.run.Seed, TrialSeed: TrialSeed(w.run.Seed, p.Traffic, n), Index: i, Point: p, Trial: n, Scale: sp.applied,
		Fabric: w.run.Fabric, Lab: sp.labFor(sc, p, w.spec.LabSpec.Name), Scheme: sc, Transport: w.src.transport(sc, sp), Created: time.Now().UTC()}
	if err := os.MkdirAll(filepath.Join(dir, scheduleDir), 0o755); err != nil {
		return BundleRef{}, err
	}
	var err error
	if b.Schedule, err = w.schedule(sp, p, b.TrialSeed, dir); err != nil {
		return BundleRef{}, err
	}
	if b.Files, err = w.shared(dir); err != nil {
		return BundleRef{}, err
	}
	if err := writeJSON(filepath.Join(dir, runFileName), w.run); err != nil {
		return BundleRef{}, err
	}
	return BundleRef{Index: i, Point: p.Name, Trial: n, Dir: rel}, writeJSON(filepath.Join(dir, bundleFileName), b)
}

// schedule writes the trial's schedule files into dir/schedule, drawn
// as the trial draws them, or links those of a bundle with the same
// draw.
func (w *bundleWriter) schedule(sp *Spec, p Point, seed uint64, dir string) ([]BundleFile, error) {
	to := filepath.Join(dir, scheduleDir)
	key := fmt.Sprintf("%s/%d/%g", p.Traffic, seed, sp.applied)
	if from, ok := w.schedules[key]; ok {
		if err := linkFiles(from, dir, scheduleDir); err != nil {
			return nil, err
		}
		return digests(dir, scheduleDir)
	}
	g, err := sp.labFor(sp.schemeAt(p), p, "bundle").Resolve()
	if err != nil {
		return nil, err
	}
	sched, err := sp.Schedule(g, p, seed)
	if err != nil {
		return nil, err
	}
	if err := sched.WriteFiles(to); err != nil {
		return nil, err
	}
	w.schedules[key] = dir
	return digests(dir, scheduleDir)
}

// shared writes (into the first bundle) or links (into the others) the
// files every bundle of the sweep carries: the experiment and what it
// names.
func (w *bundleWriter) shared(dir string) ([]BundleFile, error) {
	if w.first != "" {
		return w.src.files, linkFiles(w.first, dir, sharedFiles...)
	}
	w.first = dir
	if err := os.WriteFile(filepath.Join(dir, bundleSpecName), w.src.yaml, 0o644); err != nil {
		return nil, err
	}
	for rel, from := range w.src.copies {
		if err := copyFile(from, filepath.Join(dir, rel)); err != nil {
			return nil, err
		}
	}
	files, err := digests(dir, sharedFiles...)
	if err != nil {
		return nil, err
	}
	for i := range files {
		files[i].From = w.src.copies[files[i].Path]
	}
	w.src.files = files
	return files, nil
}

// linkFiles hard-links (or copies, across file systems) the files under
// from's entries roots (those that exist) to the same paths under to.
func linkFiles(from, to string, roots ...string) error {
	for _, root := range roots {
		err := filepath.WalkDir(filepath.Join(from, root), func(path string, d os.DirEntry, err error) error {
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			if err != nil || d.IsDir() {
				return err
			}
			rel, _ := filepath.Rel(from, path)
			dst := filepath.Join(to, rel)
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				return err
			}
			if os.Link(path, dst) == nil {
				return nil
			}
			return copyFile(path, dst)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// digests lists the files under dir's entries roots (those that exist),
// sorted, with their SHA-256.
func digests(dir string, roots ...string) ([]BundleFile, error) {
	var out []BundleFile
	for _, root := range roots {
		err := filepath.WalkDir(filepath.Join(dir, root), func(path string, d os.DirEntry, err error) error {
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			if err != nil || d.IsDir() {
				return err
			}
			sum, err := fileSHA256(path)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(dir, path)
			out = append(out, BundleFile{Path: rel, SHA256: sum})
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	slices.SortFunc(out, func(a, b BundleFile) int { return strings.Compare(a.Path, b.Path) })
	return out, nil
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// copyFile copies from to to, keeping its mode (a program stays
// executable).
func copyFile(from, to string) error {
	st, err := os.Stat(from)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return err
	}
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, st.Mode().Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
