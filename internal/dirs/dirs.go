// Package dirs lists the per-lab entries that fabric keeps in several
// places (state under /run/fabric, pinned BPF maps under /sys/fs/bpf/fabric,
// namespaces under /run/netns), so that every listing treats a missing
// root the same way, and names the directory of fabric's lasting state.
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

// StateEnv names a directory that replaces State's default: tests keep
// their own, and a user may keep fabric's state elsewhere.
const StateEnv = "FABRIC_STATE_DIR"

// State is where fabric keeps what outlives a lab and a reboot, such as
// the machine's calibrated profile: $FABRIC_STATE_DIR, else
// /var/lib/fabric.
func State() string {
	if d := os.Getenv(StateEnv); d != "" {
		return d
	}
	return "/var/lib/fabric"
}
