package tc

import (
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/fabric-emu/fabric/internal/testenv"
)

// loadUnpinned loads the port programs without pinning, keyed for
// BPF_PROG_TEST_RUN: the kernel gives the test skb the loopback device of
// the calling thread's namespace, so the port is (this namespace, lo).
func loadUnpinned(tb testing.TB) (*portObjects, portPortKey) {
	tb.Helper()
	spec, err := loadPort()
	if err != nil {
		tb.Fatal(err)
	}
	for _, m := range spec.Maps {
		m.Pinning = ebpf.PinNone
	}
	var o portObjects
	if err := spec.LoadAndAssign(&o, nil); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { o.Close() })
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
	if err != nil {
		tb.Fatal(err)
	}
	cookie, err := unix.GetsockoptUint64(fd, unix.SOL_SOCKET, unix.SO_NETNS_COOKIE)
	unix.Close(fd)
	if err != nil {
		tb.Fatal(err)
	}
	return &o, portPortKey{NetnsCookie: cookie, Ifindex: 1, Dir: dirEgress}
}

// flowPacket is an Ethernet frame of the given flow with 64 bytes of
// payload.
func flowPacket(src, dst netip.Addr, proto uint8, sport, dport uint16) []byte {
	var p []byte
	if src.Is4() {
		p = make([]byte, 14+20+8+64)
		binary.BigEndian.PutUint16(p[12:], unix.ETH_P_IP)
		ip := p[14:]
		ip[0], ip[8], ip[9] = 0x45, 64, proto
		binary.BigEndian.PutUint16(ip[2:], uint16(len(ip)))
		s, d := src.As4(), dst.As4()
		copy(ip[12:], s[:])
		copy(ip[16:], d[:])
		binary.BigEndian.PutUint16(ip[20:], sport)
		binary.BigEndian.PutUint16(ip[22:], dport)
		return p
	}
	p = make([]byte, 14+40+8+64)
	binary.BigEndian.PutUint16(p[12:], unix.ETH_P_IPV6)
	ip := p[14:]
	ip[0], ip[6], ip[7] = 0x60, proto, 64
	binary.BigEndian.PutUint16(ip[4:], uint16(len(ip)-40))
	s, d := src.As16(), dst.As16()
	copy(ip[8:], s[:])
	copy(ip[24:], d[:])
	binary.BigEndian.PutUint16(ip[40:], sport)
	binary.BigEndian.PutUint16(ip[42:], dport)
	return p
}

// TestFlowBucketMatchesProgram: FlowBucket (Go) picks the bucket that
// port_egress picks for random IPv4 and IPv6 flows of TCP, UDP and ICMP,
// read back from the skb priority the program sets (BPF_PROG_TEST_RUN).
func TestFlowBucketMatchesProgram(t *testing.T) {
	testenv.RequireRoot(t)
	o, key := loadUnpinned(t)
	const buckets = 13 // not a power of two: the modulo is exercised
	cfg := portPortCfg{Buckets: buckets}
	if err := o.PortCfgs.Update(&key, &cfg, ebpf.UpdateAny); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	seen := map[int]bool{}
	for i := range 400 {
		var src, dst netip.Addr
		if i%4 == 3 {
			var a, b [16]byte
			for j := range a {
				a[j], b[j] = byte(rng.Uint32()), byte(rng.Uint32())
			}
			src, dst = netip.AddrFrom16(a), netip.AddrFrom16(b)
		} else {
			src = netip.AddrFrom4([4]byte{10, byte(rng.Uint32()), byte(rng.Uint32()), byte(rng.Uint32())})
			dst = netip.AddrFrom4([4]byte{10, byte(rng.Uint32()), byte(rng.Uint32()), byte(rng.Uint32())})
		}
		proto := []uint8{6, 17, 1}[i%3]
		sport, dport := uint16(rng.Uint32()), uint16(rng.Uint32())
		var ctxOut [192]byte
		ret, err := o.PortEgress.Run(&ebpf.RunOptions{Data: flowPacket(src, dst, proto, sport, dport), ContextOut: &ctxOut})
		if err != nil || ret != 0 {
			t.Fatalf("run: %d, %v", ret, err)
		}
		prio := binary.NativeEndian.Uint32(ctxOut[32:]) // __sk_buff.priority
		want := FlowBucket(src, dst, proto, sport, dport, buckets)
		if prio != bucketClass(0, want) {
			t.Fatalf("flow %s:%d → %s:%d proto %d: program chose class %x, FlowBucket bucket %d (class %x)",
				src, sport, dst, dport, proto, prio, want, bucketClass(0, want))
		}
		seen[want] = true
	}
	if len(seen) != buckets {
		t.Errorf("400 random flows used %d of %d buckets", len(seen), buckets)
	}
}
