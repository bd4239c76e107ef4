package homa

import (
	"encoding/binary"
	"errors"
)

// The packet header, big-endian, after the UDP header:
//
//	type u8 | priority u8 | reserved u16 | message id u64 | message size u32 |
//	offset u32 | length u32
//
// DATA carries bytes [offset, offset+length) of the message after the
// header. GRANT allows the sender to send up to offset, at priority.
// RESEND asks again for [offset, offset+length). BUSY, from a sender,
// answers a RESEND it cannot serve yet; from a receiver, it answers a
// sender's re-sent first packet of a message it holds but has not
// finished. DONE tells the sender the message arrived whole
// (a one-way message has no response to do that, see doc.go).
const (
	typeData   = 1
	typeGrant  = 2
	typeResend = 3
	typeBusy   = 4
	typeDone   = 5

	// HeaderLen is the size of Homa's header after the UDP header.
	HeaderLen = 24
)

// header is a decoded packet header.
type header struct {
	typ, prio uint8
	id        uint64
	size      uint32
	offset    uint32
	length    uint32
}

func (h header) put(b []byte) {
	b[0], b[1], b[2], b[3] = h.typ, h.prio, 0, 0
	binary.BigEndian.PutUint64(b[4:], h.id)
	binary.BigEndian.PutUint32(b[12:], h.size)
	binary.BigEndian.PutUint32(b[16:], h.offset)
	binary.BigEndian.PutUint32(b[20:], h.length)
}

var errShort = errors.New("homa: short packet")

func parseHeader(b []byte) (header, error) {
	if len(b) < HeaderLen {
		return header{}, errShort
	}
	h := header{typ: b[0], prio: b[1], id: binary.BigEndian.Uint64(b[4:]), size: binary.BigEndian.Uint32(b[12:]),
		offset: binary.BigEndian.Uint32(b[16:]), length: binary.BigEndian.Uint32(b[20:])}
	if h.typ == typeData && int(h.length) != len(b)-HeaderLen {
		return header{}, errShort
	}
	return h, nil
}
