// Package dirs lists the per-lab entries that fabric keeps in several
// places (state under /run/fabric, pinned BPF maps under /sys/fs/bpf/fabric,
// namespaces under /run/netns), so that every listing treats a missing
// root the same way.
package dirs

import (
	"errors"
	"io/fs"
	"os"
	"sort"
)

// Subdirs returns the names of root's subdirectories, sorted. A root that
// does not exist has none: nothing was ever created there.
func Subdirs(root string) ([]string, error) {
	return Names(root, fs.DirEntry.IsDir)
}

// Names returns the names of root's entries that keep accepts, sorted. A
// root that does not exist has none.
func Names(root string, keep func(fs.DirEntry) bool) ([]string, error) {
	entries, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		if keep(e) {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	return names, nil
}
