package netnsutil

import (
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/fabric-emu/fabric/internal/dirs"
)

// Every node of every lab is a network namespace named fab.<lab>.<node>,
// bind-mounted under Dir, as `ip netns` does. Lab names have no dots, so
// the prefix fab.<lab>. finds a lab's namespaces exactly, and containers of
// docker hosts carry the same name. This is the one place that spells it.
const (
	Dir    = "/run/netns"
	prefix = "fab."
)

// Name is the namespace (and container) name of node in lab.
func Name(lab, node string) string { return prefix + lab + "." + node }

// Path is where Name is bind-mounted.
func Path(lab, node string) string { return Dir + "/" + Name(lab, node) }

// LabOf returns the lab a namespace name belongs to.
func LabOf(name string) (string, bool) {
	rest, ok := strings.CutPrefix(name, prefix)
	if !ok {
		return "", false
	}
	lab, _, ok := strings.Cut(rest, ".")
	return lab, ok && lab != ""
}

// LabPaths lists the namespace files of lab ("" for every lab), sorted.
func LabPaths(lab string) ([]string, error) {
	names, err := dirs.Names(Dir, func(e fs.DirEntry) bool {
		l, ok := LabOf(e.Name())
		return ok && (lab == "" || l == lab)
	})
	for i, n := range names {
		names[i] = filepath.Join(Dir, n)
	}
	return names, err
}
