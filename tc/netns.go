package tc

import (
	"fmt"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// nsConn talks rtnetlink to one network namespace. The library handle
// covers HTB, classes and filters; the raw socket sends what the library
// cannot encode (fifo limits) and names the namespace (its netns cookie).
// Both are opened from the namespace file without moving the calling
// goroutine, so many ports can be applied in parallel.
type nsConn struct {
	h   *netlink.Handle
	raw *nl.SocketHandle
}

func openNS(path string) (*nsConn, error) {
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return nil, fmt.Errorf("open namespace %s: %w", path, err)
	}
	defer ns.Close()
	c, err := openNSHandle(ns)
	if err != nil {
		return nil, fmt.Errorf("netlink in %s: %w", path, err)
	}
	return c, nil
}

// openPort opens t's namespace and finds t's interface in it. The caller
// closes c.
func openPort(t Target) (c *nsConn, link netlink.Link, err error) {
	if c, err = openNS(t.NetNS); err != nil {
		return nil, nil, err
	}
	if link, err = c.h.LinkByName(t.Ifname); err != nil {
		c.Close()
		return nil, nil, fmt.Errorf("port %s: %w", t, err)
	}
	return c, link, nil
}

func openNSHandle(ns netns.NsHandle) (*nsConn, error) {
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, err
	}
	s, err := nl.GetNetlinkSocketAt(ns, netns.None(), unix.NETLINK_ROUTE)
	if err != nil {
		h.Close()
		return nil, err
	}
	return &nsConn{h: h, raw: &nl.SocketHandle{Socket: s}}, nil
}

func (c *nsConn) Close() {
	c.h.Close()
	c.raw.Close()
}

// cookie is the namespace's netns cookie, the same number
// bpf_get_netns_cookie returns to the port programs.
func (c *nsConn) cookie() (uint64, error) {
	v, err := unix.GetsockoptUint64(c.raw.Socket.GetFd(), unix.SOL_SOCKET, unix.SO_NETNS_COOKIE)
	if err != nil {
		return 0, fmt.Errorf("netns cookie: %w", err)
	}
	return v, nil
}

// request starts a raw rtnetlink request on the namespace's socket.
func (c *nsConn) request(msgType, flags int) *nl.NetlinkRequest {
	return &nl.NetlinkRequest{
		NlMsghdr: unix.NlMsghdr{
			Len:   uint32(unix.SizeofNlMsghdr),
			Type:  uint16(msgType),
			Flags: unix.NLM_F_REQUEST | uint16(flags),
		},
		Sockets: map[int]*nl.SocketHandle{unix.NETLINK_ROUTE: c.raw},
	}
}
