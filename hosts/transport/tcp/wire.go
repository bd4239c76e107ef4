package tcp

import (
	"encoding/binary"
	"fmt"
	"io"

	"github.com/fabric-emu/fabric/hosts/transport"
)

// hello opens every connection:
//
//	magic u32 | kind u8 | dscp u8 | stream id u64 | cc, host (u8 length + bytes each)
type hello struct {
	kind   connKind
	dscp   transport.DSCP
	stream uint64 // a stream connection's message id
	cc     string // the sender's congestion control, as its socket reports it
	host   string // the sender's host name
}

const helloMagic uint32 = 0x46414254 // "FABT"

type connKind uint8

const (
	kindPool   connKind = 1 // messages framed one after another
	kindStream connKind = 2 // one long-lived flow
)

// frameHeader precedes each message on a pooled connection: id, size.
const frameHeader = 16

// maxMessage bounds a frame's size so a corrupt header cannot make the
// receiver read forever.
const maxMessage = 1 << 40

func (h hello) encode() []byte {
	b := binary.BigEndian.AppendUint32(nil, helloMagic)
	b = append(b, byte(h.kind), byte(h.dscp))
	b = binary.BigEndian.AppendUint64(b, h.stream)
	b = putString(b, h.cc)
	return putString(b, h.host)
}

func readHello(r io.Reader) (hello, error) {
	var fixed [14]byte
	if _, err := io.ReadFull(r, fixed[:]); err != nil {
		return hello{}, err
	}
	if m := binary.BigEndian.Uint32(fixed[:4]); m != helloMagic {
		return hello{}, fmt.Errorf("not fabric's tcp transport (magic %#x)", m)
	}
	h := hello{kind: connKind(fixed[4]), dscp: transport.DSCP(fixed[5]), stream: binary.BigEndian.Uint64(fixed[6:])}
	if h.kind != kindPool && h.kind != kindStream {
		return hello{}, fmt.Errorf("unknown connection kind %d", h.kind)
	}
	var err error
	if h.cc, err = readString(r); err != nil {
		return hello{}, err
	}
	h.host, err = readString(r)
	return h, err
}

func putString(b []byte, s string) []byte {
	if len(s) > 255 {
		s = s[:255]
	}
	return append(append(b, byte(len(s))), s...)
}

func readString(r io.Reader) (string, error) {
	var n [1]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return "", err
	}
	b := make([]byte, n[0])
	_, err := io.ReadFull(r, b)
	return string(b), err
}

func putFrame(b *[frameHeader]byte, id uint64, size int64) {
	binary.BigEndian.PutUint64(b[:8], id)
	binary.BigEndian.PutUint64(b[8:], uint64(size))
}
