package tc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"

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
	NDP       *NDPStats    `json:"ndp,omitempty"`
	// At is when the counters were read (CLOCK_MONOTONIC ns, the clock of
	// the markers), ReadNs how long reading them took.
	At     int64 `json:"at_ns"`
	ReadNs int64 `json:"read_ns"`
}

// BandStats are one band's fifo counters (with flow buckets, the sums over
// its buckets).
type BandStats struct {
	Band      int    `json:"band"`
	Bytes     uint64 `json:"bytes"`
	Packets   uint64 `json:"packets"`
	Drops     uint64 `json:"drops"`
	Backlog   uint64 `json:"backlog_bytes"`
	QueuedPkt uint64 `json:"backlog_packets"`
	// Buckets are the flow buckets of a fair band that have carried
	// traffic, by bucket number.
	Buckets []BucketStats `json:"buckets,omitempty"`
}

// BucketStats are one flow bucket's fifo counters.
type BucketStats struct {
	Bucket    int    `json:"bucket"`
	Bytes     uint64 `json:"bytes"`
	Packets   uint64 `json:"packets"`
	Drops     uint64 `json:"drops"`
	Backlog   uint64 `json:"backlog_bytes"`
	QueuedPkt uint64 `json:"backlog_packets"`
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
	var readNDP func() (*NDPStats, error)
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
		if readNDP, err = ndpReader(maps, c, link.Attrs().Index); err != nil {
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
	if readNDP != nil {
		if st.NDP, err = readNDP(); err != nil {
			return st, err
		}
	}
	st.ReadNs = monotonicNow() - st.At
	st.addQdiscs(qs)
	return st, nil
}

// addQdiscs fills in the tc counters: the root's for the port, the fifos'
// for the bands (summed over a fair band's buckets), and an NDP port's
// header and data drops.
func (st *PortStats) addQdiscs(qs []netlink.Qdisc) {
	bands := map[int]*BandStats{}
	for _, q := range qs {
		a := q.Attrs()
		s := a.Statistics
		if s == nil {
			continue
		}
		if a.Handle == netlink.MakeHandle(rootMajor, 0) {
			st.Bytes, st.Packets = s.Basic.Bytes, uint64(s.Basic.Packets)
			st.Drops, st.Overlimit = uint64(s.Queue.Drops), uint64(s.Queue.Overlimits)
			st.Backlog, st.QueuedPkt = uint64(s.Queue.Backlog), uint64(s.Queue.Qlen)
			continue
		}
		if a.Parent>>16 != rootMajor {
			continue
		}
		band, bucket, ok := classBand(uint16(a.Parent))
		if !ok {
			continue // not fabric's (the host pacer's bucket)
		}
		b := bands[band]
		if b == nil {
			b = &BandStats{Band: band}
			bands[band] = b
		}
		c := BucketStats{Bucket: bucket, Bytes: s.Basic.Bytes, Packets: uint64(s.Basic.Packets),
			Drops: uint64(s.Queue.Drops), Backlog: uint64(s.Queue.Backlog), QueuedPkt: uint64(s.Queue.Qlen)}
		b.Bytes += c.Bytes
		b.Packets += c.Packets
		b.Drops += c.Drops
		b.Backlog += c.Backlog
		b.QueuedPkt += c.QueuedPkt
		if bucket >= 0 && c.Packets > 0 {
			b.Buckets = append(b.Buckets, c)
		}
	}
	for band := range MaxBands {
		if b := bands[band]; b != nil {
			slices.SortFunc(b.Buckets, func(x, y BucketStats) int { return x.Bucket - y.Bucket })
			st.Bands = append(st.Bands, *b)
		}
	}
	if st.NDP != nil {
		for _, b := range st.Bands {
			switch b.Band {
			case ndpHeaderBand:
				st.NDP.HeaderDrops += b.Drops
			case ndpDataBand:
				st.NDP.DataDrops += b.Drops
			}
		}
	}
}

// ndpReader prepares the read of an NDP port's counters; nil when the port
// is not an NDP port.
func ndpReader(m *labMaps, c *nsConn, ifindex int) (func() (*NDPStats, error), error) {
	key, err := portKey(c, ifindex, dirEgress)
	if err != nil {
		return nil, err
	}
	var cfg portPortCfg
	if err := m.cfg.Lookup(&key, &cfg); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil, nil
		}
		return nil, err
	}
	if cfg.Marker != markNDP {
		return nil, nil
	}
	return func() (*NDPStats, error) {
		var s portPortState
		if err := m.state.LookupWithFlags(&key, &s, ebpf.LookupLock); err != nil {
			return nil, fmt.Errorf("ndp state: %w", err)
		}
		return ndpStats(&s), nil
	}, nil
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
				ms.VQ += countedQueue(&s, b).bytes
			}
			ms.DrainBps = 0
		} else {
			ms.VQ = drainedTo(s.Vq, s.LastNs, cfg.DrainBps, now)
		}
		return ms, nil
	}, nil
}

// countedQueue is band b's queue as the port programs count it (bytes and
// packets into its fifo less those seen leaving or dropped, with the
// departures port_xmit missed learnt from the peer; band_depth in
// bpf/port.bpf.c).
func countedQueue(s *portPortState, b int) depth {
	dep := s.Departed[b] + s.Dropped[b] + max(s.Missed[b], s.ArrivedPeer[b]-min(s.ArrivedPeer[b], s.Departed[b]))
	depp := s.DepartedPkts[b] + s.DroppedPkts[b] + max(s.MissedPkts[b], s.ArrivedPeerPkts[b]-min(s.ArrivedPeerPkts[b], s.DepartedPkts[b]))
	var d depth
	if s.Arrived[b] > dep {
		d.bytes = s.Arrived[b] - dep
	}
	if s.ArrivedPkts[b] > depp {
		d.pkts = s.ArrivedPkts[b] - depp
	}
	return d
}

// depth is a counted queue.
type depth struct{ bytes, pkts uint64 }

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
