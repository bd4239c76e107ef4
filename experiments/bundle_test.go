package experiments

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// A sweep's bundles carry the experiment with its lab inline and a user
// transport's file copied in, and a node draws each bundle's schedule
// byte for byte from them alone; a bundle whose schedule was changed is
// refused, and a sweep that cannot be bundled leaves no directory.
func TestBundlesAreSelfContained(t *testing.T) {
	spec, err := Load("../examples/transport-python/experiment.yaml")
	if err != nil {
		t.Fatal(err)
	}
	spec = spec.WithQuick()
	dir := filepath.Join(t.TempDir(), "bundles")
	idx, err := WriteBundles(context.Background(), spec, BundleOptions{Dir: dir, Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	if len(idx.Bundles) != len(spec.Points())*spec.Trials || idx.Seed != 5 {
		t.Fatalf("index: %d bundles, seed %d", len(idx.Bundles), idx.Seed)
	}
	for i := range idx.Bundles {
		bdir, err := BundleAt(dir, i)
		if err != nil {
			t.Fatal(err)
		}
		b, err := ReadBundle(bdir)
		if err != nil {
			t.Fatal(err)
		}
		text, _ := os.ReadFile(filepath.Join(bdir, bundleSpecName))
		if strings.Contains(string(text), "../") {
			t.Errorf("%s names a file outside the bundle:\n%s", bundleSpecName, text)
		}
		if b.Point.Scheme == "python" {
			if !slices.Equal(b.Transport.Command, []string{"python3", "files/transport.py"}) || len(b.Transport.Needs) != 1 {
				t.Errorf("transport %+v: want its script copied in and python3 named as the node's", b.Transport)
			}
			if _, err := os.Stat(filepath.Join(bdir, "files", "transport.py")); err != nil {
				t.Error(err)
			}
		}
		s, err := bundleSpec(bdir, b)
		if err != nil {
			t.Fatal(err)
		}
		rf, err := ReadRunFile(bdir)
		if err != nil {
			t.Fatal(err)
		}
		if err := checkSchedule(bdir, b, s, rf); err != nil {
			t.Errorf("bundle %d: %v", i, err)
		}
	}
	bdir, _ := BundleAt(dir, 0)
	b, _ := ReadBundle(bdir)
	if err := os.WriteFile(filepath.Join(bdir, b.Schedule[0].Path), []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, _ := bundleSpec(bdir, b)
	rf, _ := ReadRunFile(bdir)
	var be *BundleError
	if err := checkSchedule(bdir, b, s, rf); !errors.As(err, &be) {
		t.Errorf("a changed schedule: %v, want a BundleError", err)
	}
	search, err := Builtin("swp/capacity")
	if err != nil {
		t.Fatal(err)
	}
	gone := filepath.Join(t.TempDir(), "search")
	if _, err := WriteBundles(context.Background(), search.WithQuick(), BundleOptions{Dir: gone}); !errors.Is(err, ErrNotBundled) {
		t.Errorf("a search: %v, want ErrNotBundled", err)
	}
	if _, err := os.Stat(gone); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused bundling left %s behind", gone)
	}
}

// A report merges trials of one experiment and build only, each once.
func TestCheckMerge(t *testing.T) {
	root := t.TempDir()
	trial := func(dir, experiment, commit, point string) string {
		d := filepath.Join(root, dir, point, "trial-1")
		os.MkdirAll(d, 0o755)
		meta := `{"experiment": "` + experiment + `", "point": "` + point + `", "trial": 1, "fabric": {"version": "(devel)", "commit": "` + commit + `"}}`
		if err := os.WriteFile(filepath.Join(d, "meta.json"), []byte(meta), 0o644); err != nil {
			t.Fatal(err)
		}
		return filepath.Join(root, dir)
	}
	a := trial("a", "x", "c1", "p1")
	b := trial("b", "x", "c1", "p2")
	if err := CheckMerge(a, b); err != nil {
		t.Errorf("one experiment and build: %v", err)
	}
	var me *MergeError
	for name, other := range map[string]string{
		"another experiment": trial("c", "y", "c1", "p3"),
		"another build":      trial("d", "x", "c2", "p3"),
		"a trial twice":      trial("e", "x", "c1", "p1"),
	} {
		if err := CheckMerge(a, other); !errors.As(err, &me) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v, want a one-line MergeError", name, err)
		}
	}
}
