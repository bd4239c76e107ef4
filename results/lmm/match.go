package lmm

import (
	"errors"
	"fmt"
	"io"
	"os"

	"fabric/results/pcapfile"
)

// source is one pcap stream in the merge, with its current packet.
type source struct {
	r       *pcapfile.Reader
	pkt     pcapfile.Packet
	ingress bool
	done    bool
}

func (s *source) advance() error {
	p, err := s.r.Next()
	if err == io.EOF {
		s.done = true
		return nil
	}
	if err != nil {
		return err
	}
	s.pkt = p
	return nil
}

// MatchFiles matches ingress captures (one file per ingress port) against
// one egress capture, streaming all of them merged in timestamp order.
func MatchFiles(ingress []string, egress string, cfg Config) (*Result, error) {
	if len(ingress) == 0 {
		return nil, errors.New("lmm: no ingress capture")
	}
	var srcs []*source
	defer func() {
		for _, s := range srcs {
			s.r.Close()
		}
	}()
	for i, name := range append(append([]string{}, ingress...), egress) {
		r, err := pcapfile.Open(name)
		if err != nil {
			return nil, fmt.Errorf("lmm: %w", err)
		}
		srcs = append(srcs, &source{r: r, ingress: i < len(ingress)})
		if lt := r.LinkType(); lt != pcapfile.LinkTypeEthernet {
			return nil, fmt.Errorf("lmm: %s: link type %d, want Ethernet (1)", name, lt)
		}
		if err := srcs[len(srcs)-1].advance(); err != nil {
			return nil, fmt.Errorf("lmm: %w", err)
		}
	}
	m := NewMatcher(cfg)
	for {
		// With a handful of ports a linear scan beats a heap. Ties go to
		// ingress sources, which come first in srcs.
		var next *source
		for _, s := range srcs {
			if !s.done && (next == nil || s.pkt.TimeNS < next.pkt.TimeNS) {
				next = s
			}
		}
		if next == nil {
			break
		}
		if next.ingress {
			m.Ingress(next.pkt.TimeNS, next.pkt.Data)
		} else if err := m.Egress(next.pkt.TimeNS, next.pkt.Data); err != nil {
			return nil, fmt.Errorf("lmm: per-packet CSV: %w", err)
		}
		if err := next.advance(); err != nil {
			return nil, fmt.Errorf("lmm: %w", err)
		}
	}
	return m.Finish()
}

// Measure runs MatchFiles and writes its three outputs into dir as
// NAME.packets.csv, NAME.cdf.csv and NAME.summary.json.
func Measure(dir, name string, ingress []string, egress string, cfg Config) (*Summary, error) {
	f := FilesFor(dir, name)
	csv, err := os.Create(f.Packets)
	if err != nil {
		return nil, fmt.Errorf("lmm: %w", err)
	}
	defer csv.Close()
	if cfg.Packets, err = NewPacketWriter(csv); err != nil {
		return nil, fmt.Errorf("lmm: %s: %w", f.Packets, err)
	}
	r, err := MatchFiles(ingress, egress, cfg)
	if err != nil {
		return nil, err
	}
	if err := csv.Close(); err != nil {
		return nil, fmt.Errorf("lmm: %s: %w", f.Packets, err)
	}
	s := Summary{Name: name, Ingress: ingress, Egress: egress, Mode: r.Mode, Counts: r.Counts, US: r.NS.Scale(1e-3)}
	if err := writeSummary(f, s, r); err != nil {
		return nil, err
	}
	return &s, nil
}
