package transport

import (
	"net"
	"net/netip"
	"sync/atomic"
)

// ReadPackets reads datagrams from c until it is closed, counts each in n
// and hands it to handle with its sender's IPv4 address. b is reused: handle
// must copy what it keeps. fabric's UDP transports (homa, ndp) share it.
func ReadPackets(c *net.UDPConn, n *atomic.Int64, handle func(src netip.Addr, b []byte)) {
	buf := make([]byte, 65536)
	for {
		k, from, err := c.ReadFromUDPAddrPort(buf)
		if err != nil {
			return
		}
		n.Add(1)
		handle(from.Addr().Unmap(), buf[:k])
	}
}
