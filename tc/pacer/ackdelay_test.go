package pacer_test

// A return-path delay for the HULL checks that need a round-trip time: this
// kernel has no netem (DESIGN.md), so the test relays the receiver's ACKs
// through userspace inside the switch namespace and holds each one for d.
//
//	h2 ──eth2──► s0 ──(policy route: iif eth2)──► dly0 ══veth══ dly1 ◄─ relay (AF_PACKET)
//	                                                           │ after d
//	h0,h1 ◄──eth0,eth1── s0 (main table) ◄── dly0 ◄════════════┘
//
// Only packets that enter s0 from eth2 (h2's ACKs) take the detour, so the
// data path, the port under test (s0:eth2 egress), its markers and the
// LMM's capture points are untouched. Frames leave dly0 toward a made-up
// next-hop MAC, so dly1's own stack drops them (not for this host) and
// only the relay sees them; the relay sends each back into dly1 addressed
// to dly0, and s0 forwards it by its main table. Everything lives in s0
// and goes with the lab.

import (
	"encoding/binary"
	"errors"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"fabric/emu"
)

const (
	vnetHdrLen    = 10 // struct virtio_net_hdr before each frame
	delayTable    = 100
	delayNextHop  = "169.254.77.2" // dly0's made-up neighbour
	delayLocalNet = "169.254.77.1/30"
)

// ackDelay is a running relay.
type ackDelay struct {
	fd       int
	stop     atomic.Bool
	done     sync.WaitGroup
	relayed  atomic.Int64
	maxQueue atomic.Int64
	lateNs   atomic.Int64 // summed lateness of sends past their due time
	maxLate  atomic.Int64
}

type heldFrame struct {
	due   time.Time
	frame []byte
}

// delayReturnPath sends every packet entering switch sw on ifname through
// a relay that holds it for d, and stops the relay at test cleanup (before
// a lab cleanup registered earlier).
func delayReturnPath(t *testing.T, lab *emu.Lab, sw, ifname string, d time.Duration) *ackDelay {
	t.Helper()
	a := &ackDelay{fd: -1}
	var dly0MAC, dly1MAC net.HardwareAddr
	var dly1Index int
	err := lab.Do(sw, func() error {
		h, err := netlink.NewHandle()
		if err != nil {
			return err
		}
		defer h.Close()
		if err := h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "dly0", MTU: 1500}, PeerName: "dly1"}); err != nil {
			return err
		}
		l0, err := h.LinkByName("dly0")
		if err != nil {
			return err
		}
		l1, err := h.LinkByName("dly1")
		if err != nil {
			return err
		}
		dly0MAC, dly1MAC, dly1Index = l0.Attrs().HardwareAddr, l1.Attrs().HardwareAddr, l1.Attrs().Index
		for _, l := range []netlink.Link{l0, l1} {
			if err := h.LinkSetUp(l); err != nil {
				return err
			}
		}
		// The re-injected ACKs arrive on dly0 from h2's address, which
		// s0 routes via eth2: reverse-path filtering would drop them.
		for _, key := range []string{"all", "dly0"} {
			if err := os.WriteFile("/proc/sys/net/ipv4/conf/"+key+"/rp_filter", []byte("0"), 0o644); err != nil {
				return err
			}
		}
		local, _ := netlink.ParseAddr(delayLocalNet)
		if err := h.AddrAdd(l0, local); err != nil {
			return err
		}
		nextHop := net.ParseIP(delayNextHop)
		if err := h.NeighSet(&netlink.Neigh{
			LinkIndex: l0.Attrs().Index, Family: unix.AF_INET, State: netlink.NUD_PERMANENT,
			IP: nextHop, HardwareAddr: net.HardwareAddr{0x02, 0xde, 0x1a, 0, 0, 2},
		}); err != nil {
			return err
		}
		_, all, _ := net.ParseCIDR("0.0.0.0/0")
		if err := h.RouteAdd(&netlink.Route{Table: delayTable, Dst: all, Gw: nextHop, LinkIndex: l0.Attrs().Index}); err != nil {
			return err
		}
		rule := netlink.NewRule()
		rule.Family, rule.IifName, rule.Table, rule.Priority = unix.AF_INET, ifname, delayTable, 100
		if err := h.RuleAdd(rule); err != nil {
			return err
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_ALL)))
		if err != nil {
			return err
		}
		a.fd = fd
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: dly1Index}); err != nil {
			return err
		}
		// h2's segments may still carry a partial checksum (the kernel
		// fills it in at the last device that cannot): with a virtio-net
		// header on every frame the relay receives that state and hands it
		// back on send, instead of relaying a wrong checksum.
		if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_VNET_HDR, 1); err != nil {
			return err
		}
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1); err != nil {
			return err
		}
		// A short receive timeout lets the reader notice stop.
		return unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 50_000})
	})
	if err != nil {
		if a.fd >= 0 {
			unix.Close(a.fd)
		}
		t.Fatalf("return-path delay on %s:%s: %v", sw, ifname, err)
	}
	held := make(chan heldFrame, 1<<16)
	var queued atomic.Int64
	a.done.Add(2)
	// Both loops run on their own OS threads and time frames with the
	// kernel's clocks: Go's timers woke the writer up to 9 ms late here,
	// and the ACK bunches that made turned the senders into bursts.
	go func() { // reader: due = the kernel's receive timestamp + d
		runtime.LockOSThread()
		defer a.done.Done()
		defer close(held)
		buf := make([]byte, 65536)
		oob := make([]byte, 128)
		for !a.stop.Load() {
			n, oobn, _, from, err := unix.Recvmsg(a.fd, buf, oob, 0)
			if err != nil {
				if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
					continue
				}
				t.Errorf("return-path delay: %v", err)
				return
			}
			if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
				continue // the relay's own sends
			}
			if n < vnetHdrLen+14 {
				continue
			}
			f := append([]byte(nil), buf[:n]...)
			copy(f[vnetHdrLen:vnetHdrLen+6], dly0MAC)
			copy(f[vnetHdrLen+6:vnetHdrLen+12], dly1MAC)
			held <- heldFrame{due: receivedAt(oob[:oobn]).Add(d), frame: f}
			if q := queued.Add(1); q > a.maxQueue.Load() {
				a.maxQueue.Store(q)
			}
		}
	}()
	go func() { // writer: send each frame back when due (FIFO: d is constant)
		runtime.LockOSThread()
		defer a.done.Done()
		// The default 50 µs timer slack would add to every wait.
		_ = unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
		to := &unix.SockaddrLinklayer{Ifindex: dly1Index, Halen: 6}
		copy(to.Addr[:], dly0MAC)
		for h := range held {
			queued.Add(-1)
			due := unix.NsecToTimespec(h.due.UnixNano())
			for unix.ClockNanosleep(unix.CLOCK_REALTIME, unix.TIMER_ABSTIME, &due, nil) == unix.EINTR {
			}
			late := int64(time.Since(h.due))
			a.lateNs.Add(late)
			if late > a.maxLate.Load() {
				a.maxLate.Store(late)
			}
			if err := unix.Sendto(a.fd, h.frame, 0, to); err == nil {
				a.relayed.Add(1)
			}
		}
	}()
	t.Cleanup(a.close)
	return a
}

func (a *ackDelay) close() {
	if a.stop.Swap(true) {
		return
	}
	a.done.Wait()
	unix.Close(a.fd)
}

// receivedAt is the kernel's receive time of a frame (SO_TIMESTAMPNS,
// CLOCK_REALTIME), or now if the control message is missing.
func receivedAt(oob []byte) time.Time {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err == nil {
		for _, m := range msgs {
			if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SCM_TIMESTAMPNS && len(m.Data) >= 16 {
				sec := int64(binary.NativeEndian.Uint64(m.Data[0:8]))
				nsec := int64(binary.NativeEndian.Uint64(m.Data[8:16]))
				return time.Unix(sec, nsec)
			}
		}
	}
	return time.Now()
}

func htons(v uint16) uint16 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], v)
	return binary.NativeEndian.Uint16(b[:])
}
