package pcapfile

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// writeSample writes three packets with pcapgo (the writer capture uses), so
// the test also checks that the two agree on the format.
func writeSample(t *testing.T, nanos bool) []byte {
	t.Helper()
	var buf bytes.Buffer
	var w *pcapgo.Writer
	if nanos {
		w = pcapgo.NewWriterNanos(&buf)
	} else {
		w = pcapgo.NewWriter(&buf)
	}
	if err := w.WriteFileHeader(128, layers.LinkTypeEthernet); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		data := bytes.Repeat([]byte{byte(i)}, 60+i)
		ci := gopacket.CaptureInfo{
			Timestamp:     time.Unix(1700000000, int64(i)*1000+123),
			CaptureLength: len(data),
			Length:        1514,
		}
		if err := w.WritePacket(ci, data); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

func TestReadNanos(t *testing.T) {
	raw := writeSample(t, true)
	r, err := NewReader("x.pcap", bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	if !r.Nanosecond() || r.LinkType() != LinkTypeEthernet || r.Snaplen() != 128 {
		t.Fatalf("header: nanos=%v link=%d snap=%d", r.Nanosecond(), r.LinkType(), r.Snaplen())
	}
	for i := 0; i < 3; i++ {
		p, err := r.Next()
		if err != nil {
			t.Fatal(err)
		}
		if want := int64(1700000000)*1e9 + int64(i)*1000 + 123; p.TimeNS != want {
			t.Fatalf("packet %d time %d, want %d", i, p.TimeNS, want)
		}
		if len(p.Data) != 60+i || p.Data[0] != byte(i) || p.OrigLen != 1514 {
			t.Fatalf("packet %d: len %d first %d orig %d", i, len(p.Data), p.Data[0], p.OrigLen)
		}
	}
	if _, err := r.Next(); err != io.EOF {
		t.Fatalf("end: %v, want io.EOF", err)
	}
}

func TestReadMicros(t *testing.T) {
	raw := writeSample(t, false)
	r, err := NewReader("x.pcap", bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	p, err := r.Next()
	if err != nil {
		t.Fatal(err)
	}
	// 123 ns is below microsecond resolution and is lost by the writer.
	if want := int64(1700000000) * 1e9; p.TimeNS != want {
		t.Fatalf("time %d, want %d", p.TimeNS, want)
	}
}

func TestTruncatedAndCorrupt(t *testing.T) {
	raw := writeSample(t, true)
	// Record 0 at 24 (16+60 bytes), record 1 at 100 (16+61), record 2 at 177.
	cases := []struct {
		name   string
		data   []byte
		offset int64
		msg    string
	}{
		{"cut inside data", raw[:100+16+10], 100, "truncated packet data (10 of 61 bytes)"},
		{"cut inside header", raw[:177+5], 177, "truncated record header (5 of 16 bytes)"},
		{"short file header", raw[:10], 0, "truncated file header"},
		{"bad magic", append([]byte("NOTAPCAP"), raw[8:]...), 0, "not a pcap file"},
		{"impossible caplen", func() []byte {
			b := bytes.Clone(raw)
			b[100+8], b[100+9] = 0xff, 0xff // caplen of record 1 = 65535+61
			return b
		}(), 100, "exceeds snap length 128"},
	}
	for _, c := range cases {
		r, err := NewReader("cap/s0_eth1.pcap", bytes.NewReader(c.data))
		for err == nil {
			_, err = r.Next()
		}
		var pe *Error
		if !errors.As(err, &pe) {
			t.Errorf("%s: error %v is not a *pcapfile.Error", c.name, err)
			continue
		}
		if pe.Offset != c.offset || !strings.Contains(err.Error(), c.msg) || !strings.Contains(err.Error(), "cap/s0_eth1.pcap") {
			t.Errorf("%s: got %q (offset %d), want offset %d and %q", c.name, err, pe.Offset, c.offset, c.msg)
		}
	}
}
