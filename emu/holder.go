package emu

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Holder is the process that runs what a lab runs in a process (its
// pacers and delay lines), recorded in the lab's state directory so that
// Down and status find it from any process.
type Holder struct {
	PID int `json:"pid"`
	// StartTicks is the process's start time (/proc/PID/stat field 22), so
	// that a recycled PID is never signalled.
	StartTicks uint64 `json:"start_ticks"`
	// Pacers are the hosts whose pacer it runs.
	Pacers []string `json:"pacers,omitempty"`
	// Wire is true when it runs the lab's delay lines: if it dies, every
	// delayed link stops carrying traffic.
	Wire bool `json:"wire,omitempty"`
	// Agent is true for a process whose only job is holding the lab (an
	// agent of UpDetached); Down may end it. Other holders (`fabric run`,
	// a Go program) are never signalled.
	Agent bool `json:"agent,omitempty"`
}

const holderFile = "holder.json"

// ReadHolder returns the process that runs lab's pacers, if any.
func ReadHolder(lab string) (*Holder, error) {
	b, err := os.ReadFile(filepath.Join(LabDir(lab), holderFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var h Holder
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, fmt.Errorf("lab %s: corrupt %s: %w", lab, holderFile, err)
	}
	return &h, nil
}

// Alive reports whether the holder process still runs (the same process,
// not one that reused its PID).
func (h *Holder) Alive() bool {
	t, running, err := processStart(h.PID)
	return err == nil && running && t == h.StartTicks
}

func (l *Lab) writeHolder() error {
	l.mu.Lock()
	h := Holder{PID: os.Getpid(), Pacers: slices.Sorted(maps.Keys(l.pacers)), Wire: l.wire != nil, Agent: IsAgent()}
	l.mu.Unlock()
	path := filepath.Join(LabDir(l.Name), holderFile)
	if len(h.Pacers) == 0 && !h.Wire {
		if err := os.Remove(path); !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	var err error
	if h.StartTicks, _, err = processStart(h.PID); err != nil {
		return err
	}
	b, err := json.Marshal(h)
	if err != nil {
		return err
	}
	if err := os.WriteFile(path+".tmp", b, 0o644); err != nil {
		return err
	}
	return os.Rename(path+".tmp", path)
}

// stopAgent ends the lab's agent before Down removes the lab, by SIGTERM
// (then SIGKILL after agentGrace), so that it takes its pacers off the NICs
// and stops its delay lines first. A holder that is not an agent is left alone: it is a program
// whose *Lab stops its pacers, or whose pacers fail once the namespaces
// are gone.
func stopAgent(lab string) error {
	h, err := ReadHolder(lab)
	if h == nil || !h.Agent || h.PID == os.Getpid() || !h.Alive() {
		return err
	}
	_ = syscall.Kill(h.PID, syscall.SIGTERM)
	deadline := time.Now().Add(agentGrace)
	for h.Alive() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if h.Alive() {
		_ = syscall.Kill(h.PID, syscall.SIGKILL)
	}
	return err
}

// agentGrace is how long the agent gets to take its pacers off the NICs.
const agentGrace = 5 * time.Second

// processStart reads the start time (field 22, starttime) and whether
// the process still runs (field 3, state: a zombie has exited and waits
// for a parent, possibly a PID 1 that never reaps) from /proc/PID/stat.
func processStart(pid int) (ticks uint64, running bool, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false, err
	}
	// The command name (field 2) may hold spaces; the fields after it
	// follow the last ')', starting with field 3.
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 20 {
		return 0, false, fmt.Errorf("/proc/%d/stat: short", pid)
	}
	ticks, err = strconv.ParseUint(fields[22-3], 10, 64)
	return ticks, fields[0] != "Z" && fields[0] != "X", err
}
