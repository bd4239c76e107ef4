// Package probe is the LMM's probe stream (HULL §5.2): a 1500-byte UDP packet
// every millisecond from one host to another, whose one-way delay the
// receiver records. It is a measurement of fabric's, run next to whatever
// transport a scheme uses, not a transport: `fabric probe send` sends,
// `fabric probe sink` receives and writes a Probe record per packet
// (kernel receive timestamp, DSCP as it arrived).
package probe

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fabric-emu/fabric/hosts/transport"
)

// A probe datagram: magic u32 | seq u64 | send ns i64 | dscp u8 | host
// (u8 length + bytes), zero-padded to the probe size.
const (
	probeMagic      uint32 = 0x46414250 // "FABP"
	probePayloadMin        = 4 + 8 + 8 + 1 + 1
	probeHeader            = 28 // IPv4 (20) + UDP (8): Size counts the whole IP packet
)

// Defaults of a probe stream (HULL §5.2: "a 1500 byte ping packet ... every 1ms").
const (
	DefaultPort     = 5302
	DefaultInterval = time.Millisecond
	DefaultSize     = 1500
)

// Probe is one probe stream.
type Probe struct {
	Host     string // the sender's name, carried in each packet
	To       netip.Addr
	Port     int // DefaultPort when 0
	Interval time.Duration
	Size     int // IP packet size, bytes
	DSCP     transport.DSCP
	Duration time.Duration
	Log      *slog.Logger
}

type probeMsg struct {
	seq    uint64
	sendNS int64
	dscp   transport.DSCP
	host   string
}

func (p probeMsg) encode(b []byte) []byte {
	b = binary.BigEndian.AppendUint32(b[:0], probeMagic)
	b = binary.BigEndian.AppendUint64(b, p.seq)
	b = binary.BigEndian.AppendUint64(b, uint64(p.sendNS))
	b = append(b, byte(p.dscp))
	host := p.host
	if len(host) > 255 {
		host = host[:255]
	}
	return append(append(b, byte(len(host))), host...)
}

func decodeProbe(b []byte) (probeMsg, bool) {
	if len(b) < probePayloadMin || binary.BigEndian.Uint32(b) != probeMagic {
		return probeMsg{}, false
	}
	p := probeMsg{
		seq:    binary.BigEndian.Uint64(b[4:]),
		sendNS: int64(binary.BigEndian.Uint64(b[12:])),
		dscp:   transport.DSCP(b[20]),
	}
	n := int(b[21])
	if 22+n > len(b) {
		return probeMsg{}, false
	}
	p.host = string(b[22 : 22+n])
	return p, true
}

func (p *Probe) setDefaults() {
	p.Port = cmpOr(p.Port, DefaultPort)
	p.Interval = cmpOr(p.Interval, DefaultInterval)
	p.Size = cmpOr(p.Size, DefaultSize)
	if p.Log == nil {
		p.Log = slog.Default()
	}
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// Send sends the probe stream for p.Duration (or until ctx ends). The
// schedule is fixed, so the mean interval stays exact; after a stall longer
// than one interval it restarts rather than bursting.
func Send(ctx context.Context, p Probe) error {
	p.setDefaults()
	if p.Size < probeHeader+probePayloadMin {
		return fmt.Errorf("probe size %d: at least %d bytes", p.Size, probeHeader+probePayloadMin)
	}
	if p.Duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.Duration)
		defer cancel()
	}
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_TOS, p.DSCP.TOS()) })
		if err != nil {
			return err
		}
		return serr
	}}
	c, err := d.DialContext(ctx, "udp", net.JoinHostPort(p.To.String(), strconv.Itoa(p.Port)))
	if err != nil {
		return fmt.Errorf("probe to %s: %w", p.To, err)
	}
	defer c.Close()
	done := make(chan struct{})
	go func() { // on a clock thread of its own, which exits with it
		defer close(done)
		transport.PinClockThread()
		p.send(ctx, c)
	}()
	<-done
	return nil
}

func (p *Probe) send(ctx context.Context, c net.Conn) {
	buf := make([]byte, p.Size-probeHeader)
	next := time.Now()
	for seq := uint64(0); ; seq++ {
		if !transport.SleepUntil(ctx, next) {
			return
		}
		probeMsg{seq: seq, sendNS: time.Now().UnixNano(), dscp: p.DSCP, host: p.Host}.encode(buf)
		if _, err := c.Write(buf); err != nil {
			// A refused datagram (no sink yet) is lost like any other probe.
			p.Log.Debug("probe send", "err", err)
		}
		next = next.Add(p.Interval)
		if time.Since(next) > p.Interval {
			next = time.Now()
		}
	}
}
