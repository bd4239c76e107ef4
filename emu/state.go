package emu

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/fabric-emu/fabric/hosts"

	"github.com/fabric-emu/fabric/internal/dirs"
)

// StateDir holds one directory per lab with its state file. It lives on
// tmpfs (/run) on purpose: after a reboot there are no namespaces either.
var StateDir = "/run/fabric"

// State is what `fabric up` records, so that `fabric down` and every other
// command can find the lab again without the lab file.
type State struct {
	Lab     string      `json:"lab"`
	Phase   string      `json:"phase"` // "building" until Up returns, then "up"
	PID     int         `json:"pid"`   // the process that ran Up
	Created time.Time   `json:"created"`
	Spec    *Spec       `json:"spec"`
	Hosts   []hosts.Ref `json:"hosts,omitempty"` // hosts made by a non-netns runtime
}

const (
	phaseBuilding = "building"
	phaseUp       = "up"
	stateFile     = "state.json"
)

// LabDir is the state directory of lab; runtimes and tc keep their own
// per-lab files beneath it.
func LabDir(lab string) string { return filepath.Join(StateDir, lab) }

// claimLabDir creates the lab's state directory, failing if it exists:
// the directory is the lock that stops two `up`s of one name.
func claimLabDir(lab string) error {
	if err := os.MkdirAll(StateDir, 0o755); err != nil {
		return err
	}
	err := os.Mkdir(LabDir(lab), 0o755)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("lab %q already exists (remove it with: fabric down %s)", lab, lab)
	}
	return err
}

func writeState(st *State) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(LabDir(st.Lab), stateFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(LabDir(st.Lab), stateFile))
}

// ReadState reads the state file of lab.
func ReadState(lab string) (*State, error) {
	b, err := os.ReadFile(filepath.Join(LabDir(lab), stateFile))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("no lab %q (see fabric status)", lab)
		}
		return nil, err
	}
	var st State
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("lab %q: corrupt state file: %w", lab, err)
	}
	return &st, nil
}

// List returns the labs that have a state directory, sorted.
func List() ([]string, error) {
	return dirs.Subdirs(StateDir)
}
