package ndp

import (
	"encoding/binary"
	"errors"

	"github.com/fabric-emu/fabric/tc"
)

// The NDP header: the first HeaderLen bytes of every packet's UDP payload,
// big-endian. Bytes 0 and 1 are what fabric's NDP switch ports read
// (tc/ndp.go, tc/bpf/port.bpf.c): the magic and the flags, DATA without
// CHOPPED going to the data queue, everything else to the header queue.
// A trimmed packet keeps exactly these 20 bytes, so everything a receiver
// needs to NACK a trimmed packet and keep pulling is in them.
//
//	0      magic 0x4E (tc.NDPMagic)
//	1      flags: DATA, ACK, NACK, PULL, CHOPPED (set by a switch), LAST,
//	       PRIO, STREAM (0x80, fabric's own)
//	2..3   DATA: payload length (a trimmed header still says how much was cut)
//	4..11  message id (the schedule's id)
//	12..15 DATA, ACK, NACK: packet number within the message;
//	       PULL: the pull counter, how many PULLs the receiver has sent
//	       for this message so far (cumulative, so a lost or overtaken
//	       PULL is made up by the next one, NDP §3.2)
//	16..19 DATA: message size in bytes (0 for a stream);
//	       ACK, NACK, PULL: how many packets from the first the receiver
//	       holds (cumulative ACK: a lost ACK costs no retransmission once a
//	       later one arrives)
//
// A PULL with ACK set also ACKs the packet that earned it, through its
// cumulative count (NDP §3.2 note 4, PULLACK).
//
// DATA carries the message's bytes [seq×payload, …) after the header, PRIO
// when the message is prioritised (its PULLs then jump the pull queue) and
// LAST on the message's last packet.
const (
	HeaderLen = tc.NDPHeaderLen
	Magic     = tc.NDPMagic

	flagData    = tc.NDPFlagData
	flagAck     = tc.NDPFlagAck
	flagNack    = tc.NDPFlagNack
	flagPull    = tc.NDPFlagPull
	flagChopped = tc.NDPFlagChopped
	flagLast    = tc.NDPFlagLast
	flagPrio    = tc.NDPFlagPrio
	// flagStream marks DATA of a stream, a message without an end (the
	// contract's long-lived flows): its size field is 0. The switch reads
	// only DATA and CHOPPED, so fabric's transport may use this bit.
	flagStream = 0x80
)

// header is a decoded NDP header.
type header struct {
	flags  uint8
	length uint16 // DATA: payload bytes
	id     uint64
	seq    uint32 // packet number, or a PULL's counter
	aux    uint32 // DATA: message size; control: cumulative packets held
}

func (h header) put(b []byte) {
	b[0], b[1] = Magic, h.flags
	binary.BigEndian.PutUint16(b[2:], h.length)
	binary.BigEndian.PutUint64(b[4:], h.id)
	binary.BigEndian.PutUint32(b[12:], h.seq)
	binary.BigEndian.PutUint32(b[16:], h.aux)
}

var errNotNDP = errors.New("ndp: not an NDP packet")

// parseHeader decodes b's header. A whole DATA packet must carry the
// payload its header announces; a CHOPPED one carries none.
func parseHeader(b []byte) (header, error) {
	if len(b) < HeaderLen || b[0] != Magic {
		return header{}, errNotNDP
	}
	h := header{flags: b[1], length: binary.BigEndian.Uint16(b[2:]), id: binary.BigEndian.Uint64(b[4:]),
		seq: binary.BigEndian.Uint32(b[12:]), aux: binary.BigEndian.Uint32(b[16:])}
	if h.flags&flagData != 0 && h.flags&flagChopped == 0 && int(h.length) != len(b)-HeaderLen {
		return header{}, errNotNDP
	}
	return h, nil
}

// chop is what an NDP switch does to a DATA packet whose queue is full:
// the header alone, CHOPPED set (tests' networks use it).
func chop(b []byte) []byte {
	out := append([]byte(nil), b[:HeaderLen]...)
	out[1] |= flagChopped
	return out
}

// payloadSize is how many message bytes one packet carries: the MTU less
// the IP (20), UDP (8) and NDP headers. A larger datagram would be
// fragmented, and the switch neither trims nor queues fragments as NDP.
func payloadSize(mtu int) int { return max(mtu, 576) - 20 - 8 - HeaderLen }

// packets is how many packets a message of size bytes takes (at least one:
// an empty message still sends one packet to be delivered).
func packets(size int64, pay int) uint32 {
	return uint32(max((size+int64(pay)-1)/int64(pay), 1))
}
