// Package ethtool switches interface offloads through the SIOCETHTOOL
// ioctl, so fabric needs no ethtool binary. The ioctl acts on the network
// namespace of the socket it is issued on: open the socket inside the
// namespace (see Socket) and use it from any thread afterwards.
package ethtool

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Legacy single-feature commands from linux/ethtool.h. The kernel still
// maps them onto the feature bits, and they need no string-set lookup.
const (
	cmdGetTSO = 0x1e
	cmdSetTSO = 0x1f
	cmdGetGSO = 0x23
	cmdSetGSO = 0x24
	cmdGetGRO = 0x2b
	cmdSetGRO = 0x2c
)

type value struct {
	cmd  uint32
	data uint32
}

type ifreq struct {
	name [unix.IFNAMSIZ]byte
	data uintptr
	_    [16]byte // the rest of struct ifreq's union
}

// Socket opens a datagram socket in the calling thread's network
// namespace, for use with SetOffloads. The caller closes it.
func Socket() (int, error) {
	return unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
}

func ioctl(fd int, ifname string, v *value) error {
	var req ifreq
	if len(ifname) >= unix.IFNAMSIZ {
		return fmt.Errorf("ethtool: interface name %q too long", ifname)
	}
	copy(req.name[:], ifname)
	req.data = uintptr(unsafe.Pointer(v))
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&req)))
	runtime.KeepAlive(v)
	if errno != 0 {
		return errno
	}
	return nil
}

// Offloads are the segmentation offloads that matter to queue emulation:
// with them on, veth passes 64 KB super-packets that a per-packet queue
// cannot model (docs/design.md, "A lab's life").
type Offloads struct {
	TSO, GSO, GRO bool
}

// SetOffloads sets TSO, GSO and GRO on ifname through a socket from Socket.
func SetOffloads(fd int, ifname string, o Offloads) error {
	for _, f := range []struct {
		cmd  uint32
		on   bool
		name string
	}{{cmdSetTSO, o.TSO, "tso"}, {cmdSetGSO, o.GSO, "gso"}, {cmdSetGRO, o.GRO, "gro"}} {
		v := value{cmd: f.cmd}
		if f.on {
			v.data = 1
		}
		if err := ioctl(fd, ifname, &v); err != nil {
			return fmt.Errorf("ethtool %s %s: %w", ifname, f.name, err)
		}
	}
	return nil
}

// GetOffloads reads TSO, GSO and GRO of ifname.
func GetOffloads(fd int, ifname string) (Offloads, error) {
	var o Offloads
	for _, f := range []struct {
		cmd uint32
		dst *bool
	}{{cmdGetTSO, &o.TSO}, {cmdGetGSO, &o.GSO}, {cmdGetGRO, &o.GRO}} {
		v := value{cmd: f.cmd}
		if err := ioctl(fd, ifname, &v); err != nil {
			return o, fmt.Errorf("ethtool %s: %w", ifname, err)
		}
		*f.dst = v.data != 0
	}
	return o, nil
}
