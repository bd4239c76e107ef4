package emu

import (
	"context"
	"fmt"
	"sort"
	"sync"
)

// HostRuntime makes the network namespace a host lives in. The default,
// "netns", is a bare namespace made by emu itself; other runtimes (Docker,
// in package hosts) register themselves with RegisterRuntime, in the way
// containerlab keeps a registry of node kinds.
//
// Whatever the runtime, the namespace ends up bind-mounted at ref.NetNS
// (/run/netns/fab.<lab>.<node>) so that links, `fabric exec` and capture
// treat every host alike.
type HostRuntime interface {
	// Create makes the host's namespace available at ref.NetNS. emu adds
	// the links and addresses afterwards.
	Create(ctx context.Context, ref HostRef) error
	// Remove undoes Create. It must succeed when the host was never or
	// only partly created, because rollback and `down` call it blindly.
	Remove(ctx context.Context, ref HostRef) error
	// Leftovers lists the hosts of lab (every lab when lab is "") that the
	// runtime can still find by its labels, for `fabric down --all` after a
	// crash left no state file.
	Leftovers(ctx context.Context, lab string) ([]HostRef, error)
}

// HostRef names one host for its runtime.
type HostRef struct {
	Lab     string `json:"lab"`
	Node    string `json:"node"`
	NetNS   string `json:"netns"`             // /run/netns path
	Runtime string `json:"runtime"`           // registry name
	Image   string `json:"image,omitempty"`   // for container runtimes
	Handle  string `json:"handle,omitempty"`  // runtime's own id (container id), recorded in state
	RunDir  string `json:"run_dir,omitempty"` // where the runtime may keep logs
}

var (
	runtimesMu sync.RWMutex
	runtimes   = map[string]HostRuntime{}
)

// RegisterRuntime makes a host runtime available under name (for
// `hosts: {runtime: name}` in lab files). It panics on a duplicate name,
// which is a programming error.
func RegisterRuntime(name string, r HostRuntime) {
	runtimesMu.Lock()
	defer runtimesMu.Unlock()
	if _, dup := runtimes[name]; dup {
		panic("emu: runtime registered twice: " + name)
	}
	runtimes[name] = r
}

// Runtime returns the registered runtime called name.
func Runtime(name string) (HostRuntime, error) {
	runtimesMu.RLock()
	defer runtimesMu.RUnlock()
	if r, ok := runtimes[name]; ok {
		return r, nil
	}
	return nil, fmt.Errorf("unknown host runtime %q (have %s and %v; the docker runtime needs the fabric/hosts package imported)", name, DefaultRuntime, runtimeNames())
}

// RuntimeNames lists the registered runtimes.
func RuntimeNames() []string {
	runtimesMu.RLock()
	defer runtimesMu.RUnlock()
	return runtimeNames()
}

func runtimeNames() []string {
	var names []string
	for n := range runtimes {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
