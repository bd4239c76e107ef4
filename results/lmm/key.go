package lmm

import "encoding/binary"

// Key identifies one packet on both sides of a switch. It holds only fields
// a router leaves alone: a packet crossing an L3 switch gets new MAC
// addresses, a decremented TTL and so a new IP checksum, so none of those
// are part of the key (HULL §5.2 matched on the packet itself; we must do it
// from headers).
type Key struct {
	Src, Dst     uint32 // IPv4 addresses
	ID           uint16 // IP identification
	Proto        uint8
	SPort, DPort uint16
	// Extra tells apart packets that share the fields above: the TCP
	// sequence number, an FNV-1a hash of the UDP payload prefix, or the ICMP
	// echo id/sequence.
	Extra uint64
}

// hashedPayload is how many UDP payload bytes are hashed. The probe payload
// carries its sequence number and send time in the first bytes, and a
// 128-byte snap length keeps 86 payload bytes, so 64 is safely inside both.
const hashedPayload = 64

// header is what the matcher needs from one captured frame.
type header struct {
	key   Key
	ipLen uint16 // IP total length (the bytes the switch forwarded, minus L2)
}

// parseReason says why a frame has no key.
type parseReason int

const (
	parsedOK parseReason = iota
	notIPv4
	truncated
)

// parseFrame extracts the key from an Ethernet frame holding IPv4.
func parseFrame(b []byte) (header, parseReason) {
	if len(b) < 14 {
		return header{}, truncated
	}
	eth := binary.BigEndian.Uint16(b[12:])
	off := 14
	if eth == 0x8100 || eth == 0x88a8 { // one VLAN tag
		if len(b) < 18 {
			return header{}, truncated
		}
		eth = binary.BigEndian.Uint16(b[16:])
		off = 18
	}
	if eth != 0x0800 {
		return header{}, notIPv4
	}
	ip := b[off:]
	if len(ip) < 20 || ip[0]>>4 != 4 {
		return header{}, notIPv4
	}
	ihl := int(ip[0]&0x0f) * 4
	if ihl < 20 || len(ip) < ihl {
		return header{}, truncated
	}
	h := header{ipLen: binary.BigEndian.Uint16(ip[2:])}
	k := &h.key
	k.ID = binary.BigEndian.Uint16(ip[4:])
	k.Proto = ip[9]
	k.Src = binary.BigEndian.Uint32(ip[12:])
	k.Dst = binary.BigEndian.Uint32(ip[16:])
	if binary.BigEndian.Uint16(ip[6:])&0x1fff != 0 {
		return h, parsedOK // a non-first fragment carries no L4 header
	}
	l4 := ip[ihl:]
	switch k.Proto {
	case 6: // TCP
		if len(l4) < 8 {
			return h, truncated
		}
		k.SPort = binary.BigEndian.Uint16(l4)
		k.DPort = binary.BigEndian.Uint16(l4[2:])
		k.Extra = uint64(binary.BigEndian.Uint32(l4[4:]))
	case 17: // UDP
		if len(l4) < 8 {
			return h, truncated
		}
		k.SPort = binary.BigEndian.Uint16(l4)
		k.DPort = binary.BigEndian.Uint16(l4[2:])
		payload := l4[8:]
		if n := int(binary.BigEndian.Uint16(l4[4:])) - 8; n >= 0 && n < len(payload) {
			payload = payload[:n] // drop Ethernet padding of short frames
		}
		if len(payload) > hashedPayload {
			payload = payload[:hashedPayload]
		}
		k.Extra = fnv1a(payload)
	case 1: // ICMP: echo id and sequence
		if len(l4) >= 8 {
			k.Extra = uint64(binary.BigEndian.Uint32(l4[4:]))
		}
	}
	return h, parsedOK
}

// fnv1a is FNV-1a 64 inlined: hash/fnv through its interface allocates per
// packet. The test checks it against hash/fnv.
func fnv1a(b []byte) uint64 {
	const (
		offset64 = 14695981039346656037
		prime64  = 1099511628211
	)
	h := uint64(offset64)
	for _, c := range b {
		h ^= uint64(c)
		h *= prime64
	}
	return h
}
