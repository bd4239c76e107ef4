package workload

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// EnvDirs names a colon-separated list of extra directories to search for
// workload files, ahead of the default search path.
const EnvDirs = "FABRIC_WORKLOADS"

// SearchPath is where Find looks for a workload given by name: the
// directories in extra, then $FABRIC_WORKLOADS, then the first
// shared/workloads directory found walking up from the working directory
// and from the executable's directory. The project keeps its data in
// ../shared/workloads relative to the project root, so walking up from
// anywhere inside the project reaches it; nothing is copied into the binary.
func SearchPath(extra ...string) []string {
	dirs := append([]string(nil), extra...)
	if env := os.Getenv(EnvDirs); env != "" {
		dirs = append(dirs, filepath.SplitList(env)...)
	}
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if exe, err := os.Executable(); err == nil {
		starts = append(starts, filepath.Dir(exe))
	}
	for _, start := range starts {
		if d := findUp(start, filepath.Join("shared", "workloads")); d != "" {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// findUp returns the first dir/rel that exists, for dir = start and each of
// its parents.
func findUp(start, rel string) string {
	for dir := start; ; dir = filepath.Dir(dir) {
		cand := filepath.Join(dir, rel)
		if st, err := os.Stat(cand); err == nil && st.IsDir() {
			return cand
		}
		if filepath.Dir(dir) == dir {
			return ""
		}
	}
}

// Find resolves a workload reference: a path to a file (anything containing
// a slash or ending in .cdf that exists), or a name such as "hull_1k_10m"
// looked up as <dir>/<name>.cdf along dirs (SearchPath when dirs is nil).
func Find(ref string, dirs []string) (string, error) {
	if strings.ContainsRune(ref, os.PathSeparator) || strings.HasSuffix(ref, ".cdf") {
		if _, err := os.Stat(ref); err == nil {
			return ref, nil
		} else if strings.ContainsRune(ref, os.PathSeparator) {
			return "", fmt.Errorf("workload %q: %w", ref, err)
		}
	}
	if dirs == nil {
		dirs = SearchPath()
	}
	name := strings.TrimSuffix(ref, ".cdf") + ".cdf"
	for _, d := range dirs {
		p := filepath.Join(d, name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("workload %q: no %s in the search path %v (set --workload-dir or $%s, or give a file path)", ref, name, dirs, EnvDirs)
}

// Open finds and loads a workload (see Find).
func Open(ref string, dirs []string) (*CDF, error) {
	p, err := Find(ref, dirs)
	if err != nil {
		return nil, err
	}
	return Load(p)
}
