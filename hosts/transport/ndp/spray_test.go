package ndp

import (
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"testing"
)

// udpChecksum agrees with RFC 768 computed word by word, for datagrams of
// every length parity, and a datagram with it verifies (sums to all ones).
func TestUDPChecksum(t *testing.T) {
	src, dst := netip.MustParseAddr("10.0.1.2"), netip.MustParseAddr("10.0.2.2")
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{0, 1, 2, 7, 8, 9, 20, 1472, 8971, 8972} {
		payload := make([]byte, n)
		for i := range payload {
			payload[i] = byte(rng.Uint32())
		}
		hdr := []byte{0xc0, 0x00, 0x10, 0x04, byte((8 + n) >> 8), byte(8 + n), 0, 0}
		got := udpChecksum(src, dst, hdr, payload)
		binary.BigEndian.PutUint16(hdr[6:], got)
		datagram := append(append([]byte{}, hdr...), payload...)
		if len(datagram)%2 == 1 {
			datagram = append(datagram, 0)
		}
		s4, d4 := src.As4(), dst.As4()
		sum := uint32(17 + 8 + n)
		for _, b := range [][]byte{s4[:], d4[:], datagram} {
			for i := 0; i < len(b); i += 2 {
				sum += uint32(b[i])<<8 | uint32(b[i+1])
			}
		}
		for sum > 0xffff {
			sum = sum&0xffff + sum>>16
		}
		if sum != 0xffff || got == 0 {
			t.Errorf("%d-byte payload: checksum %#04x does not verify (sum %#04x)", n, got, sum)
		}
	}
}
