package endpoint

import (
	"encoding/binary"
	"fmt"
	"io"
)

// The wire protocol between clients and the server role. Every TCP
// connection opens with a hello from the client and an ack from the server;
// after that a request/response connection carries 8-byte requests (the
// number of bytes wanted) answered in order by that many bytes, and a sink
// connection carries an endless byte stream.
//
//	hello: magic u32 | kind u8 | dscp u8 | flow id u64 | pattern, cc, host (u8 length + bytes each)
//	ack:   status u8 | host, cc or error message (u8 length + bytes each)

const helloMagic uint32 = 0x46414231 // "FAB1"

type connKind uint8

const (
	kindReqResp connKind = 1 // dynamic and incast: requests answered in order
	kindSink    connKind = 2 // static and permutation: one long-lived flow
)

// maxRequest bounds a request so a corrupt header cannot make the server
// stream forever.
const maxRequest = 1 << 40

type hello struct {
	Kind    connKind
	DSCP    DSCP   // the code point the server marks its bytes with (request/response)
	FlowID  uint64 // sinks: the id the receiver records the flow and samples under
	Pattern string
	CC      string // request/response: what the server should send with; sinks: what the sender uses
	Host    string // the client's host name
}

type ack struct {
	OK   bool
	Host string // the server's host name
	CC   string // the congestion control the server's socket uses
	Err  string
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

func (h hello) encode() []byte {
	b := binary.BigEndian.AppendUint32(nil, helloMagic)
	b = append(b, byte(h.Kind), byte(h.DSCP))
	b = binary.BigEndian.AppendUint64(b, h.FlowID)
	b = putString(b, h.Pattern)
	b = putString(b, h.CC)
	return putString(b, h.Host)
}

func readHello(r io.Reader) (hello, error) {
	var fixed [14]byte
	if _, err := io.ReadFull(r, fixed[:]); err != nil {
		return hello{}, err
	}
	if m := binary.BigEndian.Uint32(fixed[:4]); m != helloMagic {
		return hello{}, fmt.Errorf("not a fabric endpoint client (magic %#x)", m)
	}
	h := hello{Kind: connKind(fixed[4]), DSCP: DSCP(fixed[5]), FlowID: binary.BigEndian.Uint64(fixed[6:])}
	if h.Kind != kindReqResp && h.Kind != kindSink {
		return hello{}, fmt.Errorf("unknown connection kind %d", h.Kind)
	}
	if h.DSCP > 63 {
		return hello{}, fmt.Errorf("bad DSCP %d", h.DSCP)
	}
	var err error
	for _, p := range []*string{&h.Pattern, &h.CC, &h.Host} {
		if *p, err = readString(r); err != nil {
			return hello{}, err
		}
	}
	return h, nil
}

func (a ack) encode() []byte {
	if !a.OK {
		return putString([]byte{1}, a.Err)
	}
	return putString(putString([]byte{0}, a.Host), a.CC)
}

func readAck(r io.Reader) (ack, error) {
	var st [1]byte
	if _, err := io.ReadFull(r, st[:]); err != nil {
		return ack{}, err
	}
	if st[0] != 0 {
		msg, _ := readString(r)
		if msg == "" {
			msg = "the server refused the connection"
		}
		return ack{}, serverRefused{msg}
	}
	a := ack{OK: true}
	var err error
	if a.Host, err = readString(r); err != nil {
		return ack{}, err
	}
	a.CC, err = readString(r)
	return a, err
}

func putRequest(b *[8]byte, size int64) { binary.BigEndian.PutUint64(b[:], uint64(size)) }
