package experiments

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/fabric-emu/fabric/results/report"
)

// MergeError is a set of trial directories that one report must not
// merge: trials of different experiments or fabric builds, or one trial
// twice.
type MergeError struct{ Msg string }

func (e *MergeError) Error() string { return e.Msg }

// trialOrigin is what of a trial's meta.json says where it belongs.
type trialOrigin struct {
	Experiment string  `json:"experiment"`
	Fabric     Version `json:"fabric"`
	Point      string  `json:"point"`
	Trial      int     `json:"trial"`
}

// CheckMerge checks that the trials under runDirs, from however many
// places, make one run's report: one experiment, one fabric build, and
// each point's trial at most once.
func CheckMerge(runDirs ...string) error {
	dirs, err := report.FindTrials(runDirs...)
	if err != nil {
		return err
	}
	var first *trialOrigin
	firstDir := ""
	seen := map[string]string{}
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, report.MetaFile))
		if err != nil {
			return err
		}
		var o trialOrigin
		if err := json.Unmarshal(b, &o); err != nil {
			return fmt.Errorf("%s: %w", filepath.Join(d, report.MetaFile), err)
		}
		if first == nil {
			first, firstDir = &o, d
		}
		switch {
		case o.Experiment != first.Experiment:
			return &MergeError{Msg: fmt.Sprintf("%s is a trial of experiment %s, %s one of %s: a report merges the trials of one experiment",
				d, o.Experiment, firstDir, first.Experiment)}
		case !o.Fabric.Same(first.Fabric):
			return &MergeError{Msg: fmt.Sprintf("%s ran on fabric %s, %s on fabric %s: a report merges trials of one fabric build",
				d, o.Fabric, firstDir, first.Fabric)}
		}
		key := fmt.Sprintf("%s/%d", o.Point, o.Trial)
		if other, ok := seen[key]; ok && o.Point != "" {
			return &MergeError{Msg: fmt.Sprintf("%s and %s are both trial %d of point %s: a report counts each trial once", other, d, o.Trial, o.Point)}
		}
		seen[key] = d
	}
	return nil
}
