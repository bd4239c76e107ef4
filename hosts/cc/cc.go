// Package cc selects TCP congestion control for lab hosts and provides DCTCP
// on kernels that lack it.
//
// Linux offers a congestion control to a socket by name (setsockopt
// TCP_CONGESTION, or the per-namespace sysctl net.ipv4.tcp_congestion_control).
// Kernels built without tcp_dctcp cannot offer "dctcp", so fabric registers its
// own DCTCP, a BPF struct_ops tcp_congestion_ops (bpf/dctcp.bpf.c), under the
// same name. Unmodified programs (iperf3 -C dctcp, the sysctl) then get DCTCP
// either way. When the kernel has DCTCP, fabric uses the kernel's; fabric's
// own is still available as "fabric_dctcp" for comparison.
//
// A BPF congestion control stays registered only while something holds its
// struct_ops link: an open file descriptor (Ensure, for one process) or a
// pin in bpffs (Register, for a lab that outlives the `fabric up` process,
// until Unregister at `fabric down`). Several holders share one registration;
// the kernel removes it when the last one lets go.
package cc

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
)

// Names that this package knows how to provide.
const (
	// DCTCP is the kernel's dctcp when it has one, otherwise fabric's.
	DCTCP = "dctcp"
	// FabricDCTCP is always fabric's BPF DCTCP, under its own name so that it
	// can run next to a kernel's dctcp.
	FabricDCTCP = "fabric_dctcp"
)

// Names are the congestion controls a lab or experiment file may name: the
// Linux ones every kernel has, and DCTCP in both forms. It is the one list
// that emu and experiments validate against.
var Names = []string{"cubic", "reno", "bbr", DCTCP, FabricDCTCP}

// Known reports whether name is one of Names.
func Known(name string) bool { return slices.Contains(Names, name) }

// NeedsECN reports whether a congestion control reacts to ECN marks and
// sends its SYN as ECT, so that hosts must negotiate ECN (RFC 8257 §3).
func NeedsECN(name string) bool { return name == DCTCP || name == FabricDCTCP }

const availablePath = "/proc/sys/net/ipv4/tcp_available_congestion_control"

// Provider says where a congestion control comes from.
type Provider string

const (
	// Kernel: built in or a loaded kernel module.
	Kernel Provider = "kernel"
	// FabricBPF: fabric's struct_ops program from this package.
	FabricBPF Provider = "fabric-bpf"
	// OtherBPF: a struct_ops program registered by something other than fabric.
	OtherBPF Provider = "other-bpf"
)

// Info describes the congestion control a lab will use.
type Info struct {
	// Name is what sockets select: TCP_CONGESTION, or the sysctl
	// net.ipv4.tcp_congestion_control inside a host's namespace.
	Name     string
	Provider Provider
}

// String is the line `fabric doctor` prints, e.g.
// "dctcp: BPF struct_ops (kernel has none)".
func (i Info) String() string {
	switch i.Provider {
	case Kernel:
		return i.Name + ": kernel module"
	case FabricBPF:
		if i.Name == DCTCP {
			return i.Name + ": BPF struct_ops (kernel has none)"
		}
		return i.Name + ": BPF struct_ops"
	case OtherBPF:
		return i.Name + ": BPF struct_ops registered by another program (not fabric's)"
	}
	return i.Name + ": " + string(i.Provider)
}

// Available lists the congestion controls the kernel offers right now,
// including BPF ones registered by anyone.
func Available() ([]string, error) {
	b, err := os.ReadFile(availablePath)
	if err != nil {
		return nil, fmt.Errorf("congestion controls: %w", err)
	}
	return strings.Fields(string(b)), nil
}

func isAvailable(name string) (bool, error) {
	names, err := Available()
	if err != nil {
		return false, err
	}
	return slices.Contains(names, name), nil
}

// ErrUnknown is returned for a name that is neither offered by the kernel nor
// one fabric can provide.
var ErrUnknown = errors.New("congestion control not available")

func unknown(name string) error {
	names, _ := Available()
	return fmt.Errorf("%w: %q (kernel offers %s; fabric adds %s and %s)",
		ErrUnknown, name, strings.Join(names, ", "), DCTCP, FabricDCTCP)
}
