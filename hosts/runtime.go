package hosts

import (
	"context"
	"fmt"
	"sort"
	"sync"
)

// Runtime makes the network namespace a host lives in. The default,
// RuntimeNetNS, is a bare namespace that emu makes itself; other runtimes
// (RuntimeDocker) register themselves with Register, in the way
// containerlab keeps a registry of node kinds.
//
// Whatever the runtime, the namespace ends up bind-mounted at ref.NetNS
// (/run/netns/fab.<lab>.<node>) so that links, `fabric exec` and capture
// treat every host alike.
type Runtime interface {
	// Create makes the host's namespace available at ref.NetNS. emu adds
	// the links and addresses afterwards.
	Create(ctx context.Context, ref Ref) error
	// Remove undoes Create. It must succeed when the host was never or
	// only partly created, because rollback and `down` call it blindly.
	Remove(ctx context.Context, ref Ref) error
	// Leftovers lists the hosts of lab (every lab when lab is "") that the
	// runtime can still find by its labels, for `fabric down --all` after a
	// crash left no state file.
	Leftovers(ctx context.Context, lab string) ([]Ref, error)
}

// Ref names one host of a lab for its runtime, and for starting processes
// on it.
type Ref struct {
	Lab     string `json:"lab"`
	Node    string `json:"node"`
	NetNS   string `json:"netns"`             // /run/netns path
	Runtime string `json:"runtime"`           // registry name
	Image   string `json:"image,omitempty"`   // for container runtimes
	Handle  string `json:"handle,omitempty"`  // runtime's own id (container id), recorded in state
	RunDir  string `json:"run_dir,omitempty"` // where the runtime may keep logs
	// Hold makes a container runtime start the image idle, held by a copy
	// of fabric mounted into it, instead of running the image's own
	// command: a user's transport image, whose command runs once per trial
	// with the trial's environment (ImageCommand).
	Hold bool `json:"hold,omitempty"`
}

// The runtimes fabric has.
const (
	RuntimeNetNS  = "netns" // a bare namespace, made by emu
	RuntimeDocker = "docker"
)

// IsNetNS reports whether a lab file's hosts.runtime (name, "" when unset)
// is the bare-namespace runtime. It is the one place that decides it.
func IsNetNS(name string) bool { return name == "" || name == RuntimeNetNS }

var (
	runtimesMu sync.RWMutex
	runtimes   = map[string]Runtime{}
)

// Register makes a host runtime available under name (for
// `hosts: {runtime: name}` in lab files). It panics on a duplicate name,
// which is a programming error.
func Register(name string, r Runtime) {
	runtimesMu.Lock()
	defer runtimesMu.Unlock()
	if _, dup := runtimes[name]; dup {
		panic("hosts: runtime registered twice: " + name)
	}
	runtimes[name] = r
}

// Lookup returns the registered runtime called name.
func Lookup(name string) (Runtime, error) {
	runtimesMu.RLock()
	defer runtimesMu.RUnlock()
	if r, ok := runtimes[name]; ok {
		return r, nil
	}
	return nil, fmt.Errorf("unknown host runtime %q (have %s and %v)", name, RuntimeNetNS, runtimeNames())
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
