package workload

import (
	"embed"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Builtin holds the flow-size distributions fabric ships, with their
// source headers (data/README.md says where each comes from), embedded in
// the binary so that an installed fabric runs every built-in scenario.
//
//go:embed data/*.cdf data/README.md
var builtin embed.FS

// EnvDirs names a colon-separated list of extra directories to search for
// workload files, ahead of the built-in set.
const EnvDirs = "FABRIC_WORKLOADS"

// SearchPath is the directories Find looks in before the built-in set: the
// ones in extra (--workload-dir), then $FABRIC_WORKLOADS.
func SearchPath(extra ...string) []string {
	dirs := append([]string(nil), extra...)
	if env := os.Getenv(EnvDirs); env != "" {
		dirs = append(dirs, filepath.SplitList(env)...)
	}
	return dirs
}

// Builtins lists the names of the built-in workloads.
func Builtins() []string {
	entries, _ := fs.Glob(builtin, "data/*.cdf")
	var out []string
	for _, e := range entries {
		out = append(out, strings.TrimSuffix(filepath.Base(e), ".cdf"))
	}
	sort.Strings(out)
	return out
}

// Open finds and loads a workload: a path to a file (anything containing a
// slash or ending in .cdf that exists), a name looked up as <dir>/<name>.cdf
// along dirs (SearchPath() when nil), or a built-in name.
func Open(ref string, dirs []string) (*CDF, error) {
	if strings.ContainsRune(ref, os.PathSeparator) || strings.HasSuffix(ref, ".cdf") {
		if _, err := os.Stat(ref); err == nil {
			return Load(ref)
		} else if strings.ContainsRune(ref, os.PathSeparator) {
			return nil, fmt.Errorf("workload %q: %w", ref, err)
		}
	}
	if dirs == nil {
		dirs = SearchPath()
	}
	name := strings.TrimSuffix(ref, ".cdf")
	for _, d := range dirs {
		if p := filepath.Join(d, name+".cdf"); fileExists(p) {
			return Load(p)
		}
	}
	f, err := builtin.Open("data/" + name + ".cdf")
	if err != nil {
		return nil, fmt.Errorf("workload %q: not a file, not in %v, and not built in (built in: %s)", ref, dirs, strings.Join(Builtins(), ", "))
	}
	defer f.Close()
	c, err := Parse(name+".cdf", f)
	if err != nil {
		return nil, err
	}
	c.File = "builtin:" + name
	return c, nil
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}
