package pacer

import (
	"encoding/binary"
	"fmt"
	"syscall"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/fabric-emu/fabric/internal/netnsutil"
)

// classSocket changes the bucket class's rate and reads its counters: a
// netlink socket of its own, opened once in the NIC's namespace, with
// requests that carry only what they need. netlink.Handle's ClassChange
// also sends the 2 KB rate tables the kernel ignores for an Ethernet link
// layer, its ClassList dumps every class of the NIC, and both read each
// answer into a fresh 64 KB buffer.
type classSocket struct {
	fd        int
	buf       []byte // answers
	seq       uint32
	changeMsg []byte // the latest change request, for the next
}

func openClassSocket(nsPath string) (*classSocket, error) {
	s := &classSocket{buf: make([]byte, 4096)}
	err := netnsutil.Do(nsPath, func() error {
		fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
		s.fd = fd
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("netlink socket: %w", err)
	}
	if err := unix.Bind(s.fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(s.fd)
		return nil, fmt.Errorf("netlink socket: %w", err)
	}
	return s, nil
}

func (s *classSocket) close() {
	if s != nil {
		unix.Close(s.fd)
	}
}

// change sets an existing HTB class to c's rate, ceiling, buffers and
// quantum. It does not wait for the kernel's answer, which comes only on
// an error: the next request reads it (do), at most resyncEvery updates
// later. One system call per change: it is the rate controller's most
// frequent work under load (a change at nearly every update of a busy
// bucket).
func (s *classSocket) change(c *netlink.HtbClass) error {
	spec := func(bytesPerSec uint64) nl.TcRateSpec {
		// An Ethernet link layer: the kernel then needs no rate table.
		return nl.TcRateSpec{Rate: uint32(min(bytesPerSec, 1<<32-1)), Linklayer: nl.LINKLAYER_ETHERNET, CellAlign: -1}
	}
	opt := nl.TcHtbCopt{Rate: spec(c.Rate), Ceil: spec(c.Ceil), Buffer: c.Buffer, Cbuffer: c.Cbuffer, Quantum: c.Quantum, Prio: c.Prio}
	s.seq++
	if c.Rate < 1<<32 && c.Ceil < 1<<32 && s.changeMsg != nil {
		// The same class again: the request differs only in its
		// sequence number and HTB's parameters, its last attribute.
		binary.NativeEndian.PutUint32(s.changeMsg[8:], s.seq)
		copy(s.changeMsg[len(s.changeMsg)-nl.SizeofTcHtbCopt:], opt.Serialize())
		return unix.Sendto(s.fd, s.changeMsg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
	}
	req := nl.NewNetlinkRequest(unix.RTM_NEWTCLASS, 0)
	req.Seq = s.seq
	a := c.Attrs()
	req.AddData(&nl.TcMsg{Family: nl.FAMILY_ALL, Ifindex: int32(a.LinkIndex), Handle: a.Handle, Parent: a.Parent})
	req.AddData(nl.NewRtAttr(nl.TCA_KIND, nl.ZeroTerminated("htb")))
	options := nl.NewRtAttr(nl.TCA_OPTIONS, nil)
	options.AddRtAttr(nl.TCA_HTB_PARMS, opt.Serialize())
	wide := c.Rate >= 1<<32 || c.Ceil >= 1<<32
	if wide {
		options.AddRtAttr(nl.TCA_HTB_RATE64, nl.Uint64Attr(c.Rate))
		options.AddRtAttr(nl.TCA_HTB_CEIL64, nl.Uint64Attr(c.Ceil))
	}
	req.AddData(options)
	msg := req.Serialize()
	if !wide {
		s.changeMsg = msg
	}
	return unix.Sendto(s.fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
}

// counters reads class handle's bytes sent and backlog.
func (s *classSocket) counters(ifidx int, handle uint32) (sent uint64, backlog uint32, err error) {
	// Without ECHO the kernel only multicasts its answer to a GET.
	req := nl.NewNetlinkRequest(unix.RTM_GETTCLASS, unix.NLM_F_ECHO)
	req.AddData(&nl.TcMsg{Family: nl.FAMILY_ALL, Ifindex: int32(ifidx), Handle: handle})
	m, err := s.do(req)
	if err != nil {
		return 0, 0, err
	}
	attrs, err := nl.ParseRouteAttr(m.Data[min(nl.SizeofTcMsg, len(m.Data)):])
	if err != nil {
		return 0, 0, err
	}
	for _, a := range attrs {
		// struct tc_stats: bytes (u64), packets, drops, overlimits, bps,
		// pps, qlen, backlog (u32 each).
		if a.Attr.Type == nl.TCA_STATS && len(a.Value) >= 36 {
			return binary.NativeEndian.Uint64(a.Value), binary.NativeEndian.Uint32(a.Value[32:]), nil
		}
	}
	return 0, 0, fmt.Errorf("class %x:%x: no statistics", handle>>16, handle&0xffff)
}

// do sends req and returns the kernel's answer to it: for a request with
// ACK the acknowledgement, for a GET its message.
func (s *classSocket) do(req *nl.NetlinkRequest) (syscall.NetlinkMessage, error) {
	s.seq++
	req.Seq = s.seq
	if err := unix.Sendto(s.fd, req.Serialize(), 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return syscall.NetlinkMessage{}, err
	}
	for {
		n, _, err := unix.Recvfrom(s.fd, s.buf, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return syscall.NetlinkMessage{}, err
		}
		msgs, err := syscall.ParseNetlinkMessage(s.buf[:n])
		if err != nil {
			return syscall.NetlinkMessage{}, err
		}
		for _, m := range msgs {
			if err := errorOf(m); err != nil {
				return m, err // this request's, or an earlier change's
			}
			if m.Header.Seq == s.seq {
				return m, nil
			}
		}
	}
}

// errorOf is the error a netlink answer reports, if it is one.
func errorOf(m syscall.NetlinkMessage) error {
	if m.Header.Type != unix.NLMSG_ERROR || len(m.Data) < 4 {
		return nil
	}
	if code := int32(binary.NativeEndian.Uint32(m.Data)); code != 0 {
		return syscall.Errno(-code)
	}
	return nil
}
