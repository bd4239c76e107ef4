package tc

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// PortStats are a port's counters: the qdisc tree's (what left the port,
// what the buffer dropped, what is queued now) and the markers'.
type PortStats struct {
	Port      string       `json:"port"` // node:ifname
	Bytes     uint64       `json:"bytes"`
	Packets   uint64       `json:"packets"`
	Drops     uint64       `json:"drops"`
	Backlog   uint64       `json:"backlog_bytes"` // queued now, all bands
	QueuedPkt uint64       `json:"backlog_packets"`
	Overlimit uint64       `json:"overlimits"` // times HTB had to wait for tokens
	Bands     []BandStats  `json:"bands,omitempty"`
	ECN       *MarkerStats `json:"ecn,omitempty"`
	Phantom   *MarkerStats `json:"phantom,omitempty"`
	// At is when the counters were read (CLOCK_MONOTONIC ns, the clock of
	// the markers), ReadNs how long reading them took.
	At     int64 `json:"at_ns"`
	ReadNs int64 `json:"read_ns"`
}

// BandStats are one band's fifo counters.
type BandStats struct {
	Band    int    `json:"band"`
	Bytes   uint64 `json:"bytes"`
	Packets uint64 `json:"packets"`
	Drops   uint64 `json:"drops"`
	Backlog uint64 `json:"backlog_bytes"`
}

// MarkerStats are a marker's counters and its virtual queue.
type MarkerStats struct {
	Packets uint64 `json:"packets"` // packets seen
	Bytes   uint64 `json:"bytes"`
	ECT     uint64 `json:"ect"`   // of which ECN-capable
	Marks   uint64 `json:"marks"` // CE marks set
	// VQ is the marker's idea of the queue, bytes: for ECN the bytes that
	// entered the fifos and have not been seen leaving; for the phantom
	// queue its counter drained to time At. VQMax is the peak.
	VQ    uint64 `json:"vq_bytes"`
	VQMax uint64 `json:"vq_max_bytes"`
	// DrainBps (phantom) and Threshold are the marker's live parameters.
	DrainBps  uint64 `json:"drain_bytes_per_s"`
	Threshold uint64 `json:"threshold_bytes"`
}

// Stats reads the counters of the port t. The tc counters and the marker
// state are read back to back after everything else is opened, so that the
// qdisc backlog and the marker's queue describe (nearly) the same instant;
// ReadNs says how long that took.
func Stats(ctx context.Context, t Target) (PortStats, error) {
	st := PortStats{Port: t.String()}
	c, link, err := openPort(t)
	if err != nil {
		return st, err
	}
	defer c.Close()
	var readECN, readPhantom func(now int64) (*MarkerStats, error)
	maps, err := openLabMaps(t.Lab)
	switch {
	case err == nil:
		defer maps.close(t.Lab)
		if readECN, err = markerReader(maps, c, link.Attrs().Index, markECN); err != nil {
			return st, err
		}
		if readPhantom, err = markerReader(maps, c, link.Attrs().Index, markPhantom); err != nil {
			return st, err
		}
	case !errors.Is(err, os.ErrNotExist): // a lab of plain ports loads no programs
		return st, err
	}

	// The ECN marker's queue is read before and after the qdisc dump and
	// averaged, which estimates it at the instant of the dump: at 1 Gbit a
	// queue moves by kilobytes during the ~30 µs a dump takes.
	var ecnBefore *MarkerStats
	if readECN != nil {
		if ecnBefore, err = readECN(0); err != nil {
			return st, err
		}
	}
	st.At = monotonicNow()
	qs, err := c.h.QdiscList(link)
	if err != nil {
		return st, fmt.Errorf("port %s: %w", t, err)
	}
	if readECN != nil {
		if st.ECN, err = readECN(st.At); err != nil {
			return st, err
		}
		if st.ECN != nil && ecnBefore != nil {
			st.ECN.VQ = (st.ECN.VQ + ecnBefore.VQ) / 2
		}
	}
	if readPhantom != nil {
		if st.Phantom, err = readPhantom(st.At); err != nil {
			return st, err
		}
	}
	st.ReadNs = monotonicNow() - st.At
	for _, q := range qs {
		a := q.Attrs()
		s := a.Statistics
		if s == nil {
			continue
		}
		switch {
		case a.Handle == netlink.MakeHandle(rootMajor, 0):
			st.Bytes, st.Packets = s.Basic.Bytes, uint64(s.Basic.Packets)
			st.Drops, st.Overlimit = uint64(s.Queue.Drops), uint64(s.Queue.Overlimits)
			st.Backlog, st.QueuedPkt = uint64(s.Queue.Backlog), uint64(s.Queue.Qlen)
		case a.Parent>>16 == rootMajor && a.Parent&0xffff >= leafBase:
			st.Bands = append(st.Bands, BandStats{
				Band: int(a.Parent&0xffff) - leafBase, Bytes: s.Basic.Bytes, Packets: uint64(s.Basic.Packets),
				Drops: uint64(s.Queue.Drops), Backlog: uint64(s.Queue.Backlog),
			})
		}
	}
	return st, nil
}

// markerReader prepares the read of one hook's marker; the reader returns
// nil when the hook has no marker of that kind.
func markerReader(m *labMaps, c *nsConn, ifindex int, marker uint32) (func(int64) (*MarkerStats, error), error) {
	key, err := portKey(c, ifindex, dirEgress)
	if err != nil {
		return nil, err
	}
	return func(now int64) (*MarkerStats, error) {
		var cfg portPortCfg
		if err := m.cfg.Lookup(&key, &cfg); err != nil {
			if errors.Is(err, ebpf.ErrKeyNotExist) {
				return nil, nil
			}
			return nil, err
		}
		if cfg.Marker != marker {
			return nil, nil
		}
		var s portPortState
		if err := m.state.LookupWithFlags(&key, &s, ebpf.LookupLock); err != nil {
			return nil, fmt.Errorf("marker state: %w", err)
		}
		ms := &MarkerStats{
			Packets: s.Packets, Bytes: s.Bytes, ECT: s.Ect, Marks: s.Marks, VQMax: s.VqMax,
			DrainBps: cfg.DrainBps, Threshold: uint64(cfg.Threshold),
		}
		if marker == markECN {
			// The counted queue: every band's arrivals minus departures.
			for b := range s.Arrived {
				dep := s.Departed[b] + max(s.Missed[b], s.ArrivedPeer[b]-min(s.ArrivedPeer[b], s.Departed[b]))
				if s.Arrived[b] > dep {
					ms.VQ += s.Arrived[b] - dep
				}
			}
			ms.DrainBps = 0
		} else {
			ms.VQ = drainedTo(s.Vq, s.LastNs, cfg.DrainBps, now)
		}
		return ms, nil
	}, nil
}

// drainedTo applies the program's drain rule up to now, so the value read
// is the virtual queue at the moment the tc counters were read.
func drainedTo(vq, last, drainBps uint64, now int64) uint64 {
	if last == 0 || now <= int64(last) {
		return vq
	}
	d := float64(now-int64(last)) / 1e9 * float64(drainBps)
	if d >= float64(vq) {
		return 0
	}
	return vq - uint64(d)
}

// monotonicNow is CLOCK_MONOTONIC, the clock of bpf_ktime_get_ns.
func monotonicNow() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}
