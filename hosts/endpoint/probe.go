package endpoint

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"strconv"
	"sync"
	"syscall"
	"time"

	"fabric/internal/records"
)

// A probe datagram: magic u32 | seq u64 | send ns i64 | dscp u8 | host
// (u8 length + bytes), zero-padded to the probe size.
const (
	probeMagic      uint32 = 0x46414250 // "FABP"
	probePayloadMin        = 4 + 8 + 8 + 1 + 1
)

type probeMsg struct {
	seq    uint64
	sendNS int64
	dscp   DSCP
	host   string
}

func (p probeMsg) encode(b []byte) []byte {
	b = binary.BigEndian.AppendUint32(b[:0], probeMagic)
	b = binary.BigEndian.AppendUint64(b, p.seq)
	b = binary.BigEndian.AppendUint64(b, uint64(p.sendNS))
	b = append(b, byte(p.dscp))
	return putString(b, p.host)
}

func decodeProbe(b []byte) (probeMsg, bool) {
	if len(b) < probePayloadMin || binary.BigEndian.Uint32(b) != probeMagic {
		return probeMsg{}, false
	}
	p := probeMsg{
		seq:    binary.BigEndian.Uint64(b[4:]),
		sendNS: int64(binary.BigEndian.Uint64(b[12:])),
		dscp:   DSCP(b[20]),
	}
	n := int(b[21])
	if 22+n > len(b) {
		return probeMsg{}, false
	}
	p.host = string(b[22 : 22+n])
	return p, true
}

// runProbe sends one ProbeSize-byte packet every ProbeInterval to each
// peer, with the code point of the default class. The receiving server
// records each packet's one-way delay.
func runProbe(ctx context.Context, cfg *Config, _ *records.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, len(cfg.Peers))
	for _, p := range cfg.Peers {
		d := net.Dialer{Control: func(network, _ string, rc syscall.RawConn) error {
			_, err := tuneSocket(rc, network == "udp6", "", cfg.DSCP.Default)
			return err
		}}
		c, err := d.DialContext(ctx, "udp", net.JoinHostPort(p.Addr.String(), strconv.Itoa(cfg.Port)))
		if err != nil {
			return fmt.Errorf("probe %s: %w", p, err)
		}
		defer c.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := sendProbes(ctx, cfg, c); err != nil {
				errs <- fmt.Errorf("probe %s: %w", p, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func sendProbes(ctx context.Context, cfg *Config, c net.Conn) error {
	buf := make([]byte, cfg.ProbeSize-probeHeader)
	host := cfg.Host
	if len(host) > len(buf)-probePayloadMin {
		host = host[:len(buf)-probePayloadMin]
	}
	pinGenerator() // sendProbes runs in a goroutine of its own
	next := time.Now()
	for seq := uint64(0); ; seq++ {
		if !sleepUntil(ctx, next) {
			return nil
		}
		probeMsg{seq: seq, sendNS: time.Now().UnixNano(), dscp: cfg.DSCP.Default, host: host}.encode(buf)
		if _, err := c.Write(buf); err != nil {
			// A refused datagram (no server yet) is lost like any other probe.
			cfg.Log.Debug("probe send", "err", err)
		}
		// A fixed schedule keeps the mean interval exact; after a stall
		// longer than one interval it restarts rather than bursting.
		next = next.Add(cfg.ProbeInterval)
		if time.Since(next) > cfg.ProbeInterval {
			next = time.Now()
		}
	}
}
