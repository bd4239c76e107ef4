package report

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// IncompleteFile marks a trial directory whose trial did not complete:
// it holds the reason, and --resume runs the trial again.
const IncompleteFile = "INCOMPLETE"

// Failure is a trial of a run that did not complete (it failed, or the
// runner did not run it after others failed), with the reason its
// IncompleteFile gives.
type Failure struct {
	Point  string
	Trial  int
	Dir    string
	Reason string
}

// FindFailures lists the trials under the run directories that hold an
// IncompleteFile and no MetaFile, sorted by directory, except under a
// SetAsideDir below a run directory.
func FindFailures(runDirs ...string) ([]Failure, error) {
	var out []Failure
	for _, root := range runDirs {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && d.Name() == SetAsideDir && path != root {
				return filepath.SkipDir
			}
			if d.IsDir() || d.Name() != IncompleteFile {
				return nil
			}
			dir := filepath.Dir(path)
			if _, err := os.Stat(filepath.Join(dir, MetaFile)); err == nil {
				return nil
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			n, _ := strconv.Atoi(strings.TrimPrefix(filepath.Base(dir), "trial-"))
			out = append(out, Failure{Point: filepath.Base(filepath.Dir(dir)), Trial: n, Dir: dir, Reason: strings.TrimSpace(string(b))})
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("report: %w", err)
		}
	}
	slices.SortFunc(out, func(a, b Failure) int { return strings.Compare(a.Dir, b.Dir) })
	return out, nil
}

// LoadRun loads every trial under the run directories and every trial
// that did not complete; it fails only when there is neither.
func LoadRun(runDirs ...string) ([]*TrialSummary, []Failure, error) {
	failed, err := FindFailures(runDirs...)
	if err != nil {
		return nil, nil, err
	}
	dirs, err := FindTrials(runDirs...)
	if err != nil {
		return nil, nil, err
	}
	if len(dirs)+len(failed) == 0 {
		return nil, nil, fmt.Errorf("report: no trial (directory with %s or %s) under %s", MetaFile, IncompleteFile, strings.Join(runDirs, ", "))
	}
	var trials []*TrialSummary
	for _, d := range dirs {
		t, err := LoadTrial(d)
		if err != nil {
			return nil, nil, err
		}
		trials = append(trials, t)
	}
	return trials, failed, nil
}

// failedSection lists the trials that did not complete with their
// reasons; trials that share a reason (those left unrun after their
// scheme failed) share a line.
func failedSection(b *strings.Builder, failed []Failure) {
	if len(failed) == 0 {
		return
	}
	fmt.Fprintf(b, "\n## Failed\n\n%d trial(s) did not complete; the report has no row, or fewer trials, for them. "+
		"`fabric run --resume RUNDIR` runs them again.\n\n", len(failed))
	var reasons []string
	byReason := map[string][]string{}
	for _, f := range failed {
		r := strings.Join(strings.Fields(f.Reason), " ")
		if _, ok := byReason[r]; !ok {
			reasons = append(reasons, r)
		}
		byReason[r] = append(byReason[r], fmt.Sprintf("%s trial %d", f.Point, f.Trial))
	}
	for _, r := range reasons {
		fmt.Fprintf(b, "- %s: %s\n", strings.Join(byReason[r], ", "), r)
	}
}

// errNoTrials is Write's error when it has neither trials nor failures.
var errNoTrials = errors.New("report: no trials")
