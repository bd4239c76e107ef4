package tc

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/fabric-emu/fabric/internal/testenv"
)

// BenchmarkMarking measures the CPU cost per packet of the port programs,
// run by the kernel on a real skb (BPF_PROG_TEST_RUN, JIT on), in ns per
// packet:
//   - egress/unconfigured: a port without an entry (lookup, return);
//   - egress/bands: DSCP classification into 4 bands;
//   - egress/ecn: classification plus the ECN marker (lock, count, CE);
//   - peer/none: the peer hook on a packet without a phantom decision.
//
// The xmit tracepoint program does the same lookups as egress/ecn without
// the packet parsing. Compare with ~1 µs per packet that one shaped hop
// costs end to end (BenchmarkSingleFlowMaxRate).
func BenchmarkMarking(b *testing.B) {
	testenv.RequireRoot(b)
	spec, err := loadPort()
	if err != nil {
		b.Fatal(err)
	}
	for _, m := range spec.Maps {
		m.Pinning = ebpf.PinNone
	}
	var o portObjects
	if err := spec.LoadAndAssign(&o, nil); err != nil {
		b.Fatal(err)
	}
	defer o.Close()
	// BPF_PROG_TEST_RUN gives the skb the loopback device of the calling
	// thread's namespace: key the port as (this namespace, lo).
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
	if err != nil {
		b.Fatal(err)
	}
	cookie, err := unix.GetsockoptUint64(fd, unix.SOL_SOCKET, unix.SO_NETNS_COOKIE)
	unix.Close(fd)
	if err != nil {
		b.Fatal(err)
	}
	key := portPortKey{NetnsCookie: cookie, Ifindex: 1, Dir: dirEgress}
	pkt := testPacket(0xe0 | 0x02) // CS7, ECT(0)
	set := func(cfg *portPortCfg) {
		if cfg == nil {
			_ = o.PortCfgs.Delete(&key)
			return
		}
		if err := o.PortCfgs.Update(&key, cfg, ebpf.UpdateAny); err != nil {
			b.Fatal(err)
		}
		if err := o.PortStates.Update(&key, &portPortState{}, ebpf.UpdateAny); err != nil {
			b.Fatal(err)
		}
	}
	bands := dscpBands(4)
	for _, c := range []struct {
		name string
		prog *ebpf.Program
		cfg  *portPortCfg
	}{
		{"egress/unconfigured", o.PortEgress, nil},
		{"egress/bands", o.PortEgress, &portPortCfg{Bands: 4, BandOf: bands}},
		{"egress/ecn", o.PortEgress, &portPortCfg{Bands: 4, BandOf: bands, Marker: markECN, Threshold: 30000, CapBytes: [8]uint32{150000, 150000, 150000, 150000}, DrainBps: 125e6, StaleNs: uint64(time.Millisecond)}},
		{"peer/none", o.PortPeer, nil},
	} {
		b.Run(c.name, func(b *testing.B) {
			set(c.cfg)
			const repeat = 100000
			var total time.Duration
			runs := 0
			for b.Loop() {
				ret, d, err := c.prog.Benchmark(pkt, repeat, nil)
				if err != nil {
					b.Fatal(err)
				}
				if ret != 0 { // TC_ACT_OK
					b.Fatalf("returned %d", ret)
				}
				total += d
				runs++
			}
			b.ReportMetric(float64(total.Nanoseconds())/float64(runs), "ns/packet")
		})
	}
	var st portPortState
	set(&portPortCfg{Marker: markECN, Threshold: 0, DrainBps: 125e6})
	if _, err := o.PortEgress.Run(&ebpf.RunOptions{Data: pkt}); err != nil {
		b.Fatal(err)
	}
	if err := o.PortStates.LookupWithFlags(&key, &st, ebpf.LookupLock); err != nil || st.Packets != 1 {
		b.Fatalf("the marker did not see the test packet: %+v %v", st, err)
	}
}

// testPacket is an Ethernet/IPv4/UDP frame of 1514 bytes with the given TOS.
func testPacket(tos byte) []byte {
	p := make([]byte, 1514)
	binary.BigEndian.PutUint16(p[12:], unix.ETH_P_IP)
	ip := p[14:]
	ip[0] = 0x45
	ip[1] = tos
	binary.BigEndian.PutUint16(ip[2:], 1500)
	ip[8] = 64
	ip[9] = unix.IPPROTO_UDP
	copy(ip[12:], []byte{10, 0, 0, 1, 10, 0, 0, 2})
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(ip[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(ip[10:], ^uint16(sum))
	return p
}
