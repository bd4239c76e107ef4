// Package emutest brings labs up for tests above emu: each under a name
// of its test's own, taken down when the test ends and checked to have
// left nothing behind (namespaces, state, pinned BPF objects, links in the
// root namespace). Tests of packages below emu build their namespaces
// with internal/nstest instead.
package emutest

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/fabric-emu/fabric/emu"
	"github.com/fabric-emu/fabric/internal/netnsutil"
	"github.com/fabric-emu/fabric/internal/nstest"
	"github.com/fabric-emu/fabric/internal/testenv"
	"github.com/fabric-emu/fabric/tc"
)

// Name is a lab name of the test's own: prefix and six random hex digits.
// Lab names are at most 24 characters, and become namespace names.
func Name(prefix string) string { return nstest.LabName(prefix) }

// Up builds the lab that the lab file src describes (src names it) and
// takes it down when the test ends, failing the test if the lab left
// anything behind. A test that wants the machine back sooner (for the
// next scenario's lab) calls the lab's Down itself; the cleanup then has
// nothing to remove.
func Up(t testing.TB, src string) *emu.Lab {
	t.Helper()
	testenv.RequireRoot(t)
	spec, err := emu.Parse(t.Name()+".yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	emu.Down(ctx, spec.Name) // what a crashed run of the test left
	lab, err := emu.Up(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := lab.Down(context.Background()); err != nil {
			t.Errorf("lab %s down: %v", spec.Name, err)
		}
		NothingLeft(t, spec.Name)
	})
	return lab
}

// NothingLeft fails t if any namespace, state directory or pinned BPF
// directory of lab remains, or the root namespace has a link it did not
// have when the test process started.
func NothingLeft(t testing.TB, lab string) {
	t.Helper()
	if ns, _ := netnsutil.LabPaths(lab); len(ns) > 0 {
		t.Errorf("lab %s left namespaces: %v", lab, ns)
	}
	for _, p := range []string{emu.LabDir(lab), filepath.Join(tc.BPFRoot, lab)} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("lab %s left %s", lab, p)
		}
	}
	for name := range rootLinks() {
		if !rootLinksBefore[name] {
			t.Errorf("the root namespace has a new link %s", name)
		}
	}
}

// rootLinksBefore are the root namespace's links when the test process
// started, before any of its labs.
var rootLinksBefore = rootLinks()

// Prefix is a prefix of lab names of the test's own, for labs that
// something else builds and names (experiments.Options.LabPrefix): tag
// and six random hex digits. The test fails if a namespace or state
// directory of a lab with the prefix is left when it ends.
func Prefix(t testing.TB, tag string) string {
	prefix := Name(tag)
	t.Cleanup(func() {
		if left := Leftovers(prefix); len(left) > 0 {
			t.Errorf("lab resources left behind: %v", left)
		}
	})
	return prefix
}

// Leftovers lists the namespaces and state directories of labs whose name
// starts with prefix.
func Leftovers(prefix string) []string {
	var left []string
	for _, pat := range []string{netnsutil.Path(prefix+"*", "*"), emu.LabDir(prefix + "*")} {
		m, _ := filepath.Glob(pat)
		left = append(left, m...)
	}
	return left
}

// rootLinks are the names of the root namespace's links.
func rootLinks() map[string]bool {
	out := map[string]bool{}
	links, _ := netlink.LinkList()
	for _, l := range links {
		out[l.Attrs().Name] = true
	}
	return out
}
