package lmm

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/fabric-emu/fabric/results/pcapfile"
)

// parsed is one frame, already keyed, as a source hands it to the merge.
type parsed struct {
	ts  int64
	h   header
	why parseReason
}

const sourceBatch = 1024

// source streams one pcap file on its own goroutine, reading and parsing
// frames into batches, so that on a 2-core machine the reading and the
// matching overlap.
type source struct {
	name    string
	ingress bool
	batches chan []parsed
	errc    chan error
	cur     []parsed
	i       int
	done    bool
	err     error
}

func openSource(name string, ingress bool) (*source, error) {
	r, err := pcapfile.Open(name)
	if err != nil {
		return nil, fmt.Errorf("lmm: %w", err)
	}
	if lt := r.LinkType(); lt != pcapfile.LinkTypeEthernet {
		r.Close()
		return nil, fmt.Errorf("lmm: %s: link type %d, want Ethernet (1)", name, lt)
	}
	s := &source{name: name, ingress: ingress, batches: make(chan []parsed, 4), errc: make(chan error, 1)}
	go s.read(r)
	return s, nil
}

func (s *source) read(r *pcapfile.Reader) {
	defer r.Close()
	defer close(s.batches)
	batch := make([]parsed, 0, sourceBatch)
	for {
		p, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			s.errc <- err
			return
		}
		h, why := parseFrame(p.Data)
		batch = append(batch, parsed{ts: p.TimeNS, h: h, why: why})
		if len(batch) == sourceBatch {
			s.batches <- batch
			batch = make([]parsed, 0, sourceBatch)
		}
	}
	if len(batch) > 0 {
		s.batches <- batch
	}
	s.errc <- nil
}

// peek returns the current frame, fetching the next batch when needed.
func (s *source) peek() (*parsed, error) {
	for !s.done && s.i == len(s.cur) {
		b, ok := <-s.batches
		if !ok {
			s.done = true
			if err := <-s.errc; err != nil {
				return nil, fmt.Errorf("lmm: %w", err)
			}
			return nil, nil
		}
		s.cur, s.i = b, 0
	}
	if s.done {
		return nil, nil
	}
	return &s.cur[s.i], nil
}

// stop drains the goroutine after an early return.
func (s *source) stop() {
	for range s.batches {
	}
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
			s.stop()
		}
	}()
	for i, name := range append(append([]string{}, ingress...), egress) {
		s, err := openSource(name, i < len(ingress))
		if err != nil {
			return nil, err
		}
		srcs = append(srcs, s)
	}
	m := NewMatcher(cfg)
	heads := make([]*parsed, len(srcs))
	for i, s := range srcs {
		var err error
		if heads[i], err = s.peek(); err != nil {
			return nil, err
		}
	}
	for {
		// With a handful of ports a linear scan beats a heap. Ties go to
		// ingress sources, which come first.
		next := -1
		for i, h := range heads {
			if h != nil && (next < 0 || h.ts < heads[next].ts) {
				next = i
			}
		}
		if next < 0 {
			break
		}
		p, s := heads[next], srcs[next]
		if s.ingress {
			m.ingress(p.ts, p.h, p.why)
		} else if err := m.egress(p.ts, p.h, p.why); err != nil {
			return nil, fmt.Errorf("lmm: per-packet CSV: %w", err)
		}
		s.i++
		var err error
		if heads[next], err = s.peek(); err != nil {
			return nil, err
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
		cfg.Packets.Flush() // stop its goroutine; the match error is the news
		return nil, err
	}
	if err := csv.Close(); err != nil {
		return nil, fmt.Errorf("lmm: %s: %w", f.Packets, err)
	}
	s := Summary{Name: name, Ingress: ingress, Egress: egress, Mode: r.Mode, Counts: r.Counts, US: r.NS.Scale(1e-3)}
	if p := r.Probe; p != nil {
		s.Probe = &ProbeSummary{Matched: p.Matched, Lost: p.Lost, US: p.NS.Scale(1e-3)}
	}
	if err := writeSummary(f, s, r); err != nil {
		return nil, err
	}
	return &s, nil
}
