package tcp

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"

	"github.com/fabric-emu/fabric/hosts/transport"

	"golang.org/x/sys/unix"
)

const (
	availableCCFile = "/proc/sys/net/ipv4/tcp_available_congestion_control"
	allowedCCFile   = "/proc/sys/net/ipv4/tcp_allowed_congestion_control"
	tcpECNFile      = "/proc/sys/net/ipv4/tcp_ecn" // per network namespace
)

// setCC sets TCP_CONGESTION on fd and explains the kernel's refusal.
func setCC(fd int, cc string) error {
	if cc == "" {
		return nil
	}
	err := unix.SetsockoptString(fd, unix.IPPROTO_TCP, unix.TCP_CONGESTION, cc)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.ENOENT):
		return fmt.Errorf("TCP_CONGESTION %q: the kernel has no such congestion control (see %s)", cc, availableCCFile)
	case errors.Is(err, unix.EPERM):
		b, _ := os.ReadFile(allowedCCFile)
		return fmt.Errorf("TCP_CONGESTION %q: not permitted; without CAP_NET_ADMIN only %s are allowed (%s)", cc, strings.TrimSpace(string(b)), allowedCCFile)
	}
	return fmt.Errorf("TCP_CONGESTION %q: %w", cc, err)
}

// getCC reads the congestion control in use on fd.
func getCC(fd int) string {
	s, err := unix.GetsockoptString(fd, unix.IPPROTO_TCP, unix.TCP_CONGESTION)
	if err != nil {
		return ""
	}
	return strings.TrimRight(s, "\x00")
}

// setTOS sets the DSCP on an IPv4 or IPv6 socket.
func setTOS(fd int, ipv6 bool, d transport.DSCP) error {
	var err error
	if ipv6 {
		err = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_TCLASS, d.TOS())
	} else {
		err = unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_TOS, d.TOS())
	}
	if err != nil {
		return fmt.Errorf("set DSCP %v: %w", d, err)
	}
	return nil
}

// tuneSocket applies cc and DSCP to a socket before connect (Dialer.Control)
// or right after accept.
func tuneSocket(rc syscall.RawConn, ipv6 bool, cc string, d transport.DSCP) (effectiveCC string, err error) {
	cerr := rc.Control(func(fd uintptr) {
		if err = setCC(int(fd), cc); err != nil {
			return
		}
		if err = setTOS(int(fd), ipv6, d); err != nil {
			return
		}
		effectiveCC = getCC(int(fd))
	})
	return effectiveCC, errors.Join(cerr, err)
}

func isIPv6(a net.Addr) bool {
	switch v := a.(type) {
	case *net.TCPAddr:
		return v.IP.To4() == nil
	case *net.UDPAddr:
		return v.IP.To4() == nil
	}
	return false
}

// ECN selects the namespace's net.ipv4.tcp_ecn. Leave it empty to keep
// whatever the lab's per-host sysctls set; "on" writes 1 (request ECN on
// outgoing connections and accept it on incoming), "off" writes 0.
// The sysctl is per network namespace, so the engine only touches its own
// host. For request/response traffic the client's SYN decides, so set it
// on the clients (the servers' default 2 accepts ECN when asked).
type ECN string

const (
	ECNLeave ECN = ""
	ECNOn    ECN = "on"
	ECNOff   ECN = "off"
)

func (e ECN) apply() error {
	var v string
	switch e {
	case ECNLeave:
		return nil
	case ECNOn:
		v = "1"
	case ECNOff:
		v = "0"
	default:
		return fmt.Errorf("ecn %q: want on, off or empty", string(e))
	}
	if err := os.WriteFile(tcpECNFile, []byte(v), 0o644); err != nil {
		return fmt.Errorf("ecn %s: cannot write %s (%w); set net.ipv4.tcp_ecn in the lab's host sysctls instead", e, tcpECNFile, err)
	}
	return nil
}
