package emu

import (
	"context"
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
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"fabric/tc/pacer"
)

// A pacer's rate controller is a loop in the process that started it
// (tc/pacer README), so pacers live with a process, not in the kernel. The
// lab records that process in pacers.json; Down stops the pacers in this
// process, or asks a holder process (what `fabric up` leaves behind) to
// stop and exit.

// PacerHolder is the process that runs a lab's pacers.
type PacerHolder struct {
	PID int `json:"pid"`
	// StartTicks is the process's start time (/proc/PID/stat field 22), so
	// that a recycled PID is never signalled.
	StartTicks uint64   `json:"start_ticks"`
	Hosts      []string `json:"hosts"`
	// Agent is true for a process whose only job is holding the pacers
	// (`fabric up`); Down may end it. Other holders (`fabric run`, a Go
	// program) are never signalled.
	Agent bool `json:"agent,omitempty"`
}

const pacersFile = "pacers.json"

// running holds the pacers this process started, by lab and host.
var running = struct {
	sync.Mutex
	labs map[string]map[string]*pacer.Pacer
}{labs: map[string]map[string]*pacer.Pacer{}}

// processIsAgent is set by BecomePacerAgent.
var processIsAgent atomic.Bool

// BecomePacerAgent declares that this process exists only to run pacers,
// so Down may end it with SIGTERM. `fabric up` calls it in the process it
// leaves behind, before Up, so the holder record says "agent" from its
// first write.
func BecomePacerAgent() { processIsAgent.Store(true) }

// PacedHosts are the hosts of g whose pacer the lab file turns on.
func (s *Spec) PacedHosts(g *Graph) []string {
	var out []string
	for _, h := range g.Hosts() {
		if _, on := s.PacerConfig(h); on {
			out = append(out, h.Name)
		}
	}
	return out
}

// StartPacers puts a pacer on the NIC of each host with the parameters the
// lab file gives it (PacerConfig; on or off there), run by this process
// until StopPacers or Down. On error the pacers it started are stopped.
func (l *Lab) StartPacers(ctx context.Context, hosts []string) error {
	if len(hosts) == 0 {
		return nil
	}
	ctx = context.WithoutCancel(ctx) // the pacers outlive the call
	started := map[string]*pacer.Pacer{}
	fail := func(err error) error {
		for _, p := range started {
			p.Stop()
		}
		return err
	}
	for _, h := range hosts {
		n := l.Graph.Node(h)
		if n == nil || n.Kind != Host || len(n.Ifaces) == 0 {
			return fail(fmt.Errorf("lab %s: no host %q to pace", l.Name, h))
		}
		running.Lock()
		dup := running.labs[l.Name][h] != nil
		running.Unlock()
		if dup || started[h] != nil {
			return fail(fmt.Errorf("lab %s: host %s already has a pacer", l.Name, h))
		}
		cfg, _ := l.Spec.PacerConfig(n)
		p, err := pacer.Start(ctx, NetNSPath(l.Name, h), n.Ifaces[0].Name, cfg)
		if err != nil {
			return fail(fmt.Errorf("lab %s: host %s: %w", l.Name, h, err))
		}
		started[h] = p
	}
	running.Lock()
	if running.labs[l.Name] == nil {
		running.labs[l.Name] = map[string]*pacer.Pacer{}
	}
	for h, p := range started {
		running.labs[l.Name][h] = p
	}
	all := slices.Sorted(maps.Keys(running.labs[l.Name]))
	running.Unlock()
	if err := writeHolder(l.Name, all); err != nil {
		return fail(errors.Join(err, l.StopPacers()))
	}
	return nil
}

// Pacers are the lab's pacers running in this process, by host.
func (l *Lab) Pacers() map[string]*pacer.Pacer {
	running.Lock()
	defer running.Unlock()
	out := map[string]*pacer.Pacer{}
	for h, p := range running.labs[l.Name] {
		out[h] = p
	}
	return out
}

// StopPacers stops the lab's pacers running in this process and removes
// them from the hosts' NICs; the lab stays up.
func (l *Lab) StopPacers() error { return stopLocalPacers(l.Name) }

// ReadPacerHolder returns the process that runs lab's pacers, if any.
func ReadPacerHolder(lab string) (*PacerHolder, error) {
	b, err := os.ReadFile(filepath.Join(LabDir(lab), pacersFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var h PacerHolder
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, fmt.Errorf("lab %s: corrupt %s: %w", lab, pacersFile, err)
	}
	return &h, nil
}

// Alive reports whether the holder process still runs (the same process,
// not one that reused its PID).
func (h *PacerHolder) Alive() bool {
	t, running, err := processStart(h.PID)
	return err == nil && running && t == h.StartTicks
}

func writeHolder(lab string, hosts []string) error {
	if len(hosts) == 0 {
		if err := os.Remove(filepath.Join(LabDir(lab), pacersFile)); !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	start, _, err := processStart(os.Getpid())
	if err != nil {
		return err
	}
	b, err := json.Marshal(PacerHolder{PID: os.Getpid(), StartTicks: start, Hosts: hosts, Agent: processIsAgent.Load()})
	if err != nil {
		return err
	}
	tmp := filepath.Join(LabDir(lab), pacersFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(LabDir(lab), pacersFile))
}

func stopLocalPacers(lab string) error {
	running.Lock()
	ps := running.labs[lab]
	delete(running.labs, lab)
	running.Unlock()
	if len(ps) == 0 {
		return nil
	}
	var errs []error
	for _, p := range ps {
		errs = append(errs, p.Stop())
	}
	if h, _ := ReadPacerHolder(lab); h != nil && h.PID == os.Getpid() {
		if err := os.Remove(filepath.Join(LabDir(lab), pacersFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// stopPacers ends the lab's pacers before Down removes the lab: those of
// this process directly, those of an agent process by SIGTERM (then
// SIGKILL after agentGrace). A holder that is not an agent is left alone;
// its pacers fail once the namespaces are gone.
func stopPacers(lab string) error {
	err := stopLocalPacers(lab)
	h, rerr := ReadPacerHolder(lab)
	if h == nil || !h.Agent || h.PID == os.Getpid() || !h.Alive() {
		return errors.Join(err, rerr)
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
