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

// Agent is the process that runs what a lab runs in a process (its
// pacers and delay loop), recorded in the lab's state directory so that
// Down and status find it from any process.
type Agent struct {
	PID int `json:"pid"`
	// StartTicks is the process's start time (/proc/PID/stat field 22), so
	// that a recycled PID is never signalled.
	StartTicks uint64 `json:"start_ticks"`
	// Pacers are the hosts whose pacer it runs.
	Pacers []string `json:"pacers,omitempty"`
	// DelayLines is true when it runs the lab's delay loop: if it dies,
	// every delayed link stops carrying traffic.
	DelayLines bool `json:"delay_lines,omitempty"`
	// Detached is true for a process whose only job is to run the lab
	// (fabric up's child, UpDetached); Down may end it. Other agents
	// (`fabric run`, a Go program) are never signalled.
	Detached bool `json:"detached,omitempty"`
}

// UnmarshalJSON also reads what labs built by earlier builds wrote:
// "wire" for DelayLines and "agent" for Detached.
func (a *Agent) UnmarshalJSON(b []byte) error {
	type plain Agent
	var v struct {
		plain
		Wire  bool `json:"wire"`
		Agent bool `json:"agent"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*a = Agent(v.plain)
	a.DelayLines = a.DelayLines || v.Wire
	a.Detached = a.Detached || v.Agent
	return nil
}

// agentFile is where a lab's agent is recorded; oldAgentFile is its name
// in labs built by earlier builds, still read.
const (
	agentFile    = "agent.json"
	oldAgentFile = "holder.json"
)

// ReadAgent returns the process that runs lab's pacers and delay loop, if
// any.
func ReadAgent(lab string) (*Agent, error) {
	name := agentFile
	b, err := os.ReadFile(filepath.Join(LabDir(lab), name))
	if errors.Is(err, fs.ErrNotExist) {
		name = oldAgentFile
		b, err = os.ReadFile(filepath.Join(LabDir(lab), name))
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var a Agent
	if err := json.Unmarshal(b, &a); err != nil {
		return nil, fmt.Errorf("lab %s: corrupt %s: %w", lab, name, err)
	}
	return &a, nil
}

// Alive reports whether the agent process still runs (the same process,
// not one that reused its PID).
func (a *Agent) Alive() bool {
	t, running, err := processStart(a.PID)
	return err == nil && running && t == a.StartTicks
}

func (l *Lab) writeAgentFile() error {
	l.mu.Lock()
	a := Agent{PID: os.Getpid(), Pacers: slices.Sorted(maps.Keys(l.pacers)), DelayLines: l.delayLoop != nil, Detached: IsAgent()}
	l.mu.Unlock()
	path := filepath.Join(LabDir(l.Name), agentFile)
	if len(a.Pacers) == 0 && !a.DelayLines {
		if err := os.Remove(path); !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	var err error
	if a.StartTicks, _, err = processStart(a.PID); err != nil {
		return err
	}
	b, err := json.Marshal(a)
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
// and stops its delay loop first. An agent that is not detached is left
// alone: it is a program whose *Lab stops its pacers, or whose pacers fail
// once the namespaces are gone.
func stopAgent(lab string) error {
	h, err := ReadAgent(lab)
	if h == nil || !h.Detached || h.PID == os.Getpid() || !h.Alive() {
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
