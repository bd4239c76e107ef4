package experiments

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fabric-emu/fabric/emu"
	"github.com/fabric-emu/fabric/hosts/workload"
	"github.com/fabric-emu/fabric/internal/features"
	"github.com/fabric-emu/fabric/internal/machine"
	"github.com/fabric-emu/fabric/results/report"
)

// BundleError is a bundle this node must not run: another format or
// fabric build, or one whose files do not match what it says.
type BundleError struct{ Msg string }

func (e *BundleError) Error() string { return e.Msg }

// ReadBundle reads dir's bundle.json.
func ReadBundle(dir string) (*Bundle, error) {
	b, err := os.ReadFile(filepath.Join(dir, bundleFileName))
	if err != nil {
		return nil, &BundleError{Msg: fmt.Sprintf("%s is not a trial bundle: %v", dir, err)}
	}
	var out Bundle
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, &BundleError{Msg: fmt.Sprintf("%s: %v", filepath.Join(dir, bundleFileName), err)}
	}
	if out.Format != BundleFormat {
		return nil, &BundleError{Msg: fmt.Sprintf("%s: bundle format %d, this fabric reads %d", dir, out.Format, BundleFormat)}
	}
	return &out, nil
}

// ReadBundleIndex reads dir's index.json.
func ReadBundleIndex(dir string) (*BundleIndex, error) {
	b, err := os.ReadFile(filepath.Join(dir, indexFileName))
	if err != nil {
		return nil, &BundleError{Msg: fmt.Sprintf("%s holds no bundle index: %v", dir, err)}
	}
	var idx BundleIndex
	if err := json.Unmarshal(b, &idx); err != nil {
		return nil, &BundleError{Msg: fmt.Sprintf("%s: %v", filepath.Join(dir, indexFileName), err)}
	}
	return &idx, nil
}

// BundleAt is the directory of bundle i of the index in dir.
func BundleAt(dir string, i int) (string, error) {
	idx, err := ReadBundleIndex(dir)
	if err != nil {
		return "", err
	}
	if i < 0 || i >= len(idx.Bundles) || idx.Bundles[i].Index != i {
		return "", &BundleError{Msg: fmt.Sprintf("%s: no bundle %d (the index has 0 to %d)", dir, i, len(idx.Bundles)-1)}
	}
	return filepath.Join(dir, idx.Bundles[i].Dir), nil
}

// RunBundle runs the trial of the bundle in dir into the run directory
// opts.Out (OUT/POINT/trial-N and OUT/run.json, which trials of the same
// sweep share), as Run runs it: the same runner and the same trial, its
// reruns included. It returns the trial's directory and summary.
func RunBundle(ctx context.Context, dir string, opts Options) (string, *report.TrialSummary, error) {
	opts = opts.withDefaults()
	if err := emu.RequireRoot(); err != nil {
		return "", nil, err
	}
	b, spec, rf, err := openBundle(ctx, dir)
	if err != nil {
		return "", nil, err
	}
	if err := claimRunFile(opts.Out, rf); err != nil {
		return "", nil, err
	}
	r := newRunner(spec, opts, rf, opts.Out)
	r.profile = opts.Profile
	fmt.Fprintf(opts.Progress, "[bundle %d] %s trial %d on %s\n", b.Index, b.Point.Name, b.Trial, thisMachine(nil).Name)
	t, _, err := r.at(b.Point).settleTrial(ctx, b.Point, b.Trial)
	return r.trialDir(b.Point, b.Trial), t, err
}

// openBundle reads a bundle and makes its spec and run file as the node
// runs them, refusing a bundle of another build and one whose schedule
// this build does not draw byte for byte.
func openBundle(ctx context.Context, dir string) (*Bundle, *Spec, *RunFile, error) {
	b, err := ReadBundle(dir)
	if err != nil {
		return nil, nil, nil, err
	}
	if here := BuildVersion(); !here.Same(b.Fabric) {
		return nil, nil, nil, &BundleError{Msg: fmt.Sprintf("%s was bundled by fabric %s; this is fabric %s: a bundle runs on the build that made it",
			dir, b.Fabric, here)}
	}
	spec, err := bundleSpec(dir, b)
	if err != nil {
		return nil, nil, nil, err
	}
	rf, err := ReadRunFile(dir)
	if err != nil {
		return nil, nil, nil, err
	}
	rf.Kernel, rf.Machine, rf.Doctor = kernelRelease(), machine.Read(), features.Detect(ctx)
	if err := checkSchedule(dir, b, spec, rf); err != nil {
		return nil, nil, nil, err
	}
	return b, spec, rf, nil
}

// bundleSpec parses the bundle's experiment as fabric run parsed the
// original: its workloads found in the bundle first, its quick variant
// and --scale applied.
func bundleSpec(dir string, b *Bundle) (*Spec, error) {
	data, err := os.ReadFile(filepath.Join(dir, bundleSpecName))
	if err != nil {
		return nil, err
	}
	wl := filepath.Join(dir, "workloads")
	if _, err := os.Stat(wl); err == nil {
		abs, _ := filepath.Abs(wl)
		os.Setenv(workload.EnvDirs, strings.Join(append([]string{abs}, workload.SearchPath()...), string(os.PathListSeparator)))
	}
	var spec *Spec
	if name, ok := strings.CutPrefix(b.Source, "builtin:"); ok {
		if spec, err = Parse(builtinPrefix+name+".yaml", data, ""); err == nil {
			spec.Dir = ""
		}
	} else {
		spec, err = Parse(filepath.Join(dir, bundleSpecName), data, "")
	}
	if err != nil {
		return nil, err
	}
	if b.Quick {
		spec = spec.WithQuick()
	}
	if b.ScaleFlag != "" {
		if err := spec.SetScale(b.ScaleFlag); err != nil {
			return nil, err
		}
	}
	return spec, nil
}

// checkSchedule checks the bundle's schedule files against bundle.json,
// then draws the trial as the runner will and compares the two, byte
// for byte.
func checkSchedule(dir string, b *Bundle, spec *Spec, rf *RunFile) error {
	var p *Point
	for _, q := range spec.Points() {
		if q.Name == b.Point.Name && q.Index == b.Point.Index {
			p = &q
		}
	}
	if p == nil {
		return &BundleError{Msg: fmt.Sprintf("%s: its experiment has no point %s", dir, b.Point.Name)}
	}
	sp := (&runner{spec: spec, run: rf}).at(*p).spec
	g, err := sp.labFor(sp.schemeAt(*p), *p, "bundle").Resolve()
	if err != nil {
		return err
	}
	sched, err := sp.Schedule(g, *p, TrialSeed(rf.Seed, p.Traffic, b.Trial))
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "fabric-schedule")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := sched.WriteFiles(tmp); err != nil {
		return err
	}
	drawn, err := digests(tmp, ".")
	if err != nil {
		return err
	}
	held, err := digests(dir, scheduleDir)
	if err != nil {
		return err
	}
	if !slices.EqualFunc(held, b.Schedule, func(x, y BundleFile) bool { return x.Path == y.Path && x.SHA256 == y.SHA256 }) {
		return &BundleError{Msg: fmt.Sprintf("%s: its schedule files are not the ones bundle.json lists", dir)}
	}
	if len(drawn) != len(b.Schedule) {
		return &BundleError{Msg: fmt.Sprintf("%s: this build draws %d schedule files, the bundle holds %d", dir, len(drawn), len(b.Schedule))}
	}
	for i, f := range drawn {
		want := b.Schedule[i]
		if filepath.Join(scheduleDir, f.Path) != want.Path || f.SHA256 != want.SHA256 {
			return &BundleError{Msg: fmt.Sprintf("%s: %s differs from the schedule this build draws", dir, want.Path)}
		}
	}
	return nil
}

// claimRunFile makes out a run directory of rf's sweep: it writes
// run.json when there is none (atomically: trials on many nodes may
// share out) and otherwise checks that the one there is of the same
// experiment, seed and build.
func claimRunFile(out string, rf *RunFile) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	path := filepath.Join(out, runFileName)
	b, err := json.MarshalIndent(rf, "", "  ")
	if err != nil {
		return err
	}
	tmp := fmt.Sprintf("%s.%d.%d", path, os.Getpid(), time.Now().UnixNano())
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	defer os.Remove(tmp)
	if err := os.Link(tmp, path); err == nil || !errors.Is(err, os.ErrExist) {
		return err
	}
	have, err := ReadRunFile(out)
	if err != nil {
		return err
	}
	if have.Name != rf.Name || have.Quick != rf.Quick || have.Seed != rf.Seed || !have.Fabric.Same(rf.Fabric) {
		return &BundleError{Msg: fmt.Sprintf("--out %s holds a run of %s (quick=%v, seed %d, fabric %s), not of this bundle's %s (quick=%v, seed %d, fabric %s)",
			out, have.Name, have.Quick, have.Seed, have.Fabric, rf.Name, rf.Quick, rf.Seed, rf.Fabric)}
	}
	return nil
}
