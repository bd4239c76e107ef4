package cc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// mu serialises registrations within this process; between processes the
// kernel arbitrates (EEXIST on a taken name) and adopt shares the winner's.
var mu sync.Mutex

// Ensure makes congestion control name selectable by sockets until release
// is called, and says which implementation it is.
//
// "dctcp" is the kernel's when it has one (loaded, or a module the kernel
// autoloads); otherwise it is fabric's BPF DCTCP, registered now or shared
// with the fabric process or lab that registered it first. "fabric_dctcp" is
// always fabric's. Any other name must be one the kernel offers.
//
// release drops this caller's hold; the kernel unregisters a BPF congestion
// control when its last holder is gone. Sockets already using it keep it.
func Ensure(ctx context.Context, name string) (release func() error, info Info, err error) {
	reg, info, err := acquire(ctx, name)
	if err != nil {
		return nil, Info{}, err
	}
	if reg == nil {
		return func() error { return nil }, info, nil
	}
	var once sync.Once
	release = func() error {
		var err error
		once.Do(func() { err = reg.close() })
		return err
	}
	return release, info, nil
}

// Describe says which implementation Ensure would use for name, without
// registering anything: for `fabric doctor`. When fabric's DCTCP would be
// needed, it loads the programs through the verifier (and unloads them), so
// an error here is the kernel's actual refusal, wrapped in ErrKernelRefused.
func Describe(name string) (Info, error) {
	switch name {
	case DCTCP:
		if kernelHasDCTCP() {
			return Info{Name: DCTCP, Provider: Kernel}, nil
		}
		fallthrough
	case FabricDCTCP:
		if ok, err := isAvailable(name); err != nil {
			return Info{}, err
		} else if ok {
			reg, err := adopt(name)
			if err != nil {
				return Info{}, err
			}
			if reg == nil {
				return Info{Name: name, Provider: OtherBPF}, nil
			}
			reg.close()
			return Info{Name: name, Provider: FabricBPF}, nil
		}
		if err := verify(); err != nil {
			return Info{}, err
		}
		return Info{Name: name, Provider: FabricBPF}, nil
	}
	if kernelOffers(name) {
		return Info{Name: name, Provider: Kernel}, nil
	}
	return Info{}, unknown(name)
}

// acquire returns the registration to hold for name, or nil when the kernel
// provides it and there is nothing to hold.
func acquire(ctx context.Context, name string) (*registration, Info, error) {
	switch name {
	case DCTCP:
		if kernelHasDCTCP() {
			return nil, Info{Name: DCTCP, Provider: Kernel}, nil
		}
		return acquireBPF(ctx, DCTCP)
	case FabricDCTCP:
		return acquireBPF(ctx, FabricDCTCP)
	}
	if kernelOffers(name) {
		return nil, Info{Name: name, Provider: Kernel}, nil
	}
	return nil, Info{}, unknown(name)
}

// How long acquireBPF waits for a name registered by a struct_ops link it
// cannot find: a fabric registration being torn down disappears within
// milliseconds; one that stays is someone else's.
const (
	foreignRetry = 10 * time.Millisecond
	foreignWait  = 300 * time.Millisecond
)

func acquireBPF(ctx context.Context, ccName string) (*registration, Info, error) {
	mu.Lock()
	defer mu.Unlock()
	info := Info{Name: ccName, Provider: FabricBPF}
	deadline := time.Now().Add(foreignWait)
	for {
		present, err := isAvailable(ccName)
		if err != nil {
			return nil, Info{}, err
		}
		if present {
			reg, err := adopt(ccName)
			if err != nil {
				return nil, Info{}, err
			}
			if reg != nil {
				return reg, info, nil
			}
			if time.Now().After(deadline) {
				return nil, Info{Name: ccName, Provider: OtherBPF}, nil
			}
		} else {
			reg, err := register(ccName)
			if err == nil {
				return reg, info, nil
			}
			if !errors.Is(err, os.ErrExist) {
				return nil, Info{}, err
			}
			// Another process registered it between our look and our
			// attach: go round and adopt theirs.
		}
		select {
		case <-ctx.Done():
			return nil, Info{}, ctx.Err()
		case <-time.After(foreignRetry):
		}
	}
}

// kernelHasDCTCP reports whether the kernel itself provides dctcp. A loaded
// or built-in tcp_dctcp shows in /sys/module. A module that is not loaded yet
// is autoloaded by the kernel when a privileged socket asks for it, the same
// way `iperf3 -C dctcp` would get it; we ask once with a throwaway socket.
func kernelHasDCTCP() bool {
	const mod = "/sys/module/tcp_dctcp"
	if _, err := os.Stat(mod); err == nil {
		return true
	}
	if ok, _ := isAvailable(DCTCP); ok {
		return false // registered, but not by a kernel module: BPF
	}
	if trySocketCC(DCTCP) != nil {
		return false
	}
	_, err := os.Stat(mod)
	return err == nil
}

// kernelOffers reports whether name is offered now or can be autoloaded.
func kernelOffers(name string) bool {
	if ok, _ := isAvailable(name); ok {
		return true
	}
	return trySocketCC(name) == nil
}

// trySocketCC asks a fresh TCP socket (never connected) for name.
func trySocketCC(name string) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("probe socket: %w", err)
	}
	defer unix.Close(fd)
	return unix.SetsockoptString(fd, unix.IPPROTO_TCP, unix.TCP_CONGESTION, name)
}
