package capture_test

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"golang.org/x/net/bpf"

	"github.com/fabric-emu/fabric/results/capture"
)

// frame is an Ethernet frame carrying an IPv4 header from src to dst.
func frame(etherType uint16, proto byte, src, dst string) []byte {
	b := make([]byte, 14+20+8)
	binary.BigEndian.PutUint16(b[12:], etherType)
	b[14] = 0x45
	b[14+9] = proto
	s, d := netip.MustParseAddr(src).As4(), netip.MustParseAddr(dst).As4()
	copy(b[14+12:], s[:])
	copy(b[14+16:], d[:])
	return b
}

// The address lists keep a packet only when its source (destination) is
// one of them, and drop what is not IPv4; the program runs in x/net/bpf's
// interpreter, the kernel's semantics for these instructions.
func TestFilterKeepsListedAddresses(t *testing.T) {
	a, b, c := netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("10.0.0.3"), netip.MustParseAddr("10.0.0.4")
	f := capture.Filter{Src: []netip.Addr{a, b, c}, Dst: []netip.Addr{netip.MustParseAddr("10.0.0.1")}}
	raw, err := f.Program(96)
	if err != nil {
		t.Fatal(err)
	}
	prog, ok := bpf.Disassemble(raw)
	if !ok {
		t.Fatal("the program does not disassemble")
	}
	vm, err := bpf.NewVM(prog)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		pkt  []byte
		keep bool
	}{
		{frame(0x0800, 17, "10.0.0.2", "10.0.0.1"), true},
		{frame(0x0800, 6, "10.0.0.3", "10.0.0.1"), true},
		{frame(0x0800, 6, "10.0.0.4", "10.0.0.1"), true},
		{frame(0x0800, 6, "10.0.0.5", "10.0.0.1"), false}, // a source not listed
		{frame(0x0800, 6, "10.0.0.2", "10.0.0.9"), false}, // a destination not listed
		{frame(0x0806, 0, "10.0.0.2", "10.0.0.1"), false}, // not IPv4
	} {
		n, err := vm.Run(c.pkt)
		if err != nil {
			t.Fatal(err)
		}
		if got := n > 0; got != c.keep {
			s := c.pkt[14+12 : 14+16]
			d := c.pkt[14+16 : 14+20]
			t.Errorf("%v → %v (ethertype %#x): kept %v, want %v", s, d, binary.BigEndian.Uint16(c.pkt[12:]), got, c.keep)
		}
	}
	if _, err := (capture.Filter{Dst: []netip.Addr{netip.MustParseAddr("::1")}}).Program(96); err == nil {
		t.Error("an IPv6 address in Dst compiled")
	}
}
