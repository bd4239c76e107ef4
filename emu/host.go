package emu

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"

	"github.com/fabric-emu/fabric/hosts"
	"github.com/fabric-emu/fabric/internal/netnsutil"
)

// Host is a handle on one host of a running lab, like Mininet's h1:
//
//	out, err := lab.Host("h1").Cmd(ctx, "ping", "-c1", lab.Host("h2").Addr().String())
//
// A handle for a name the lab does not have carries that error, and every
// method returns it.
type Host struct {
	lab  *Lab
	node *Node
	err  error
}

// Host returns the handle of the host called name.
func (l *Lab) Host(name string) *Host {
	n := l.Graph.Node(name)
	if n == nil || n.Kind != HostNode {
		return &Host{lab: l, err: fmt.Errorf("lab %s has no host %q", l.Name, name)}
	}
	return &Host{lab: l, node: n}
}

// Hosts returns a handle for every host, in the lab's order.
func (l *Lab) Hosts() []*Host {
	var out []*Host
	for _, n := range l.Graph.Hosts() {
		out = append(out, &Host{lab: l, node: n})
	}
	return out
}

// Err is why the handle is invalid, or nil.
func (h *Host) Err() error { return h.err }

// Name is the host's name ("" for an invalid handle).
func (h *Host) Name() string {
	if h.node == nil {
		return ""
	}
	return h.node.Name
}

// Addr is the host's address (invalid for an invalid handle).
func (h *Host) Addr() netip.Addr {
	if h.node == nil {
		return netip.Addr{}
	}
	return h.node.Addr
}

// NetNS is the path of the host's network namespace.
func (h *Host) NetNS() string { return netnsutil.Path(h.lab.Name, h.Name()) }

// Ref names the host for package hosts (starting processes, runtimes).
func (h *Host) Ref() (hosts.Ref, error) {
	if h.err != nil {
		return hosts.Ref{}, h.err
	}
	return hosts.Ref{
		Lab: h.lab.Name, Node: h.node.Name, NetNS: h.NetNS(),
		Runtime: h.lab.Spec.Hosts.RuntimeName(), Image: h.lab.Spec.Hosts.Image, RunDir: LabDir(h.lab.Name), Hold: h.lab.Spec.Hosts.Hold,
	}, nil
}

// Cmd runs argv inside the host's namespace, with this machine's programs
// (for docker hosts too), waits for it and returns its combined output. A
// non-zero exit is a *hosts.ExitError.
func (h *Host) Cmd(ctx context.Context, argv ...string) (string, error) {
	ref, err := h.Ref()
	if err != nil {
		return "", err
	}
	var out bytes.Buffer
	err = hosts.Exec(ctx, ref, argv, nil, &out, &out)
	return out.String(), err
}

// Start starts argv on the host (a process in its namespace, or a `docker
// exec` in its container) with stdout and stderr appended to logPath, and
// returns without waiting: stop it with Signal.
func (h *Host) Start(ctx context.Context, argv []string, logPath string) (hosts.Process, error) {
	ref, err := h.Ref()
	if err != nil {
		return nil, err
	}
	return hosts.Start(ctx, ref, argv, logPath)
}

// Do runs fn on a thread inside the host's namespace; sockets fn opens
// stay there.
func (h *Host) Do(fn func() error) error {
	if h.err != nil {
		return h.err
	}
	return netnsutil.Do(h.NetNS(), fn)
}
