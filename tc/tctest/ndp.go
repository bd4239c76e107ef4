package tctest

import (
	"encoding/binary"
	"fmt"

	"github.com/fabric-emu/fabric/tc"
)

// CheckTrimmed checks one captured frame that left an NDP port trimmed: 48
// IP bytes (62 on the wire) with a valid IP checksum, DSCP CS7, UDP length
// 28 and a UDP checksum that verifies (udpChecksumOK), and an NDP header
// with DATA and CHOPPED.
func CheckTrimmed(f Frame) error {
	if f.Len != tc.NDPTrimmedLen+14 || len(f.Data) < f.Len {
		return fmt.Errorf("frame of %d bytes, want %d", f.Len, tc.NDPTrimmedLen+14)
	}
	ip := f.Data[14:]
	switch {
	case ip[0] != 0x45:
		return fmt.Errorf("IP version/IHL %#x", ip[0])
	case int(binary.BigEndian.Uint16(ip[2:])) != tc.NDPTrimmedLen:
		return fmt.Errorf("IP tot_len %d", binary.BigEndian.Uint16(ip[2:]))
	case ipChecksum(ip[:20]) != 0:
		return fmt.Errorf("IP header checksum %#04x does not verify", binary.BigEndian.Uint16(ip[10:]))
	case ip[1]>>2 != tc.DSCPHeader:
		return fmt.Errorf("DSCP %d, want CS7 (56)", ip[1]>>2)
	}
	udp := ip[20:]
	switch {
	case binary.BigEndian.Uint16(udp[4:]) != 8+tc.NDPHeaderLen:
		return fmt.Errorf("UDP length %d", binary.BigEndian.Uint16(udp[4:]))
	case !udpChecksumOK(f):
		return fmt.Errorf("UDP checksum %#04x does not verify (checksum not ready: %v)", binary.BigEndian.Uint16(udp[6:]), f.CsumNotReady)
	}
	ndp := udp[8:]
	if ndp[0] != tc.NDPMagic || ndp[1] != tc.NDPFlagData|tc.NDPFlagChopped {
		return fmt.Errorf("NDP header %x, want magic %#x and flags DATA|CHOPPED", ndp[:2], tc.NDPMagic)
	}
	return nil
}

// ipChecksum is the one's complement sum of an IPv4 header: 0 when its
// checksum field is right.
func ipChecksum(h []byte) uint16 { return ^fold(onesSum(0, h)) }

// udpChecksumOK says whether the UDP checksum of a captured IPv4 frame
// (without IP options) verifies, as the receiving host checks it. Zero,
// "no checksum", does not count: a trimming port must leave a real one. A
// frame whose checksum was not ready (Frame.CsumNotReady) is first
// completed as the kernel completes it (skb_checksum_help, which a delay
// line's NFQUEUE runs): the sum of the bytes from the UDP header on, the
// field holding the pseudo-header's sum. A wrong seed fails here as it
// fails after a delay line.
func udpChecksumOK(f Frame) bool {
	ip := f.Data[14:]
	end := int(binary.BigEndian.Uint16(ip[2:]))
	if end > len(ip) || end < 28 {
		return false
	}
	udp := append([]byte(nil), ip[20:end]...)
	if f.CsumNotReady {
		binary.BigEndian.PutUint16(udp[6:], ^fold(onesSum(0, udp)))
	}
	if binary.BigEndian.Uint16(udp[6:]) == 0 {
		return false
	}
	pseudo := onesSum(0, ip[12:20]) + uint32(ip[9]) + uint32(len(udp))
	return fold(onesSum(pseudo, udp)) == 0xffff
}

// onesSum adds b's 16-bit big-endian words (a last odd byte padded with
// zero) to sum, unfolded.
func onesSum(sum uint32, b []byte) uint32 {
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	return sum
}

// fold folds a one's complement sum to 16 bits.
func fold(sum uint32) uint16 {
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return uint16(sum)
}

// IsNDP says whether a captured frame is an IPv4/UDP NDP packet.
func IsNDP(f Frame) bool {
	d := f.Data
	return len(d) >= 62 && binary.BigEndian.Uint16(d[12:]) == 0x0800 && d[23] == 17 && d[42] == tc.NDPMagic
}
