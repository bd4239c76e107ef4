package tc

import (
	"errors"
	"fmt"
	"os"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
)

// Queue reads one port's queue again and again, for a sampler that must
// see a queue move (a DCTCP sawtooth lasts a few RTTs): it keeps the
// namespace's netlink socket and the lab's maps open, which Stats opens
// and closes on every call.
type Queue struct {
	c    *nsConn
	link netlink.Link
	maps *labMaps // nil on a plain port, which loads no programs
	lab  string
	key  portPortKey
	ecn  bool // the port runs the threshold marker, which counts its queue
}

// QueueDepth is a port's queue at one instant.
type QueueDepth struct {
	// At is when it was read (CLOCK_MONOTONIC ns).
	At int64
	// Bytes and Packets are the qdisc tree's backlog, and Sent and
	// SentPackets what it has passed on since it was built: the kernel's
	// own counters.
	Bytes, Packets, Sent, SentPackets uint64
}

// OpenQueue opens port t for repeated reads; Close releases it.
func OpenQueue(t Target) (*Queue, error) {
	c, link, err := openPort(t)
	if err != nil {
		return nil, err
	}
	q := &Queue{c: c, link: link, lab: t.Lab}
	maps, err := openLabMaps(t.Lab)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return q, nil
	case err != nil:
		c.Close()
		return nil, err
	}
	q.maps = maps
	if q.key, err = portKey(c, link.Attrs().Index, dirEgress); err != nil {
		q.Close()
		return nil, err
	}
	var cfg portPortCfg
	switch err := maps.cfg.Lookup(&q.key, &cfg); {
	case errors.Is(err, ebpf.ErrKeyNotExist):
	case err != nil:
		q.Close()
		return nil, err
	default:
		q.ecn = cfg.Marker == markECN
	}
	return q, nil
}

// Depth reads the qdisc tree's backlog: one netlink dump of the port's
// qdiscs.
func (q *Queue) Depth() (QueueDepth, error) {
	d := QueueDepth{At: monotonicNow()}
	qs, err := q.c.h.QdiscList(q.link)
	if err != nil {
		return d, fmt.Errorf("port %s: %w", q.link.Attrs().Name, err)
	}
	for _, qd := range qs {
		a := qd.Attrs()
		if a.Handle == netlink.MakeHandle(rootMajor, 0) && a.Statistics != nil {
			s := a.Statistics
			d.Bytes, d.Packets = uint64(s.Queue.Backlog), uint64(s.Queue.Qlen)
			d.Sent, d.SentPackets = s.Basic.Bytes, uint64(s.Basic.Packets)
		}
	}
	return d, nil
}

// Counted reads the threshold marker's counted queue, bytes (the queue it
// marks against: arrivals into the fifos less departures): one map lookup,
// a few µs against a netlink dump's tens. ok is false on a port without
// the marker.
func (q *Queue) Counted() (bytes uint64, at int64, ok bool, err error) {
	if !q.ecn {
		return 0, 0, false, nil
	}
	var s portPortState
	if err := q.maps.state.LookupWithFlags(&q.key, &s, ebpf.LookupLock); err != nil {
		return 0, 0, false, fmt.Errorf("marker state: %w", err)
	}
	at = monotonicNow()
	for b := range s.Arrived {
		bytes += countedQueue(&s, b).bytes
	}
	return bytes, at, true, nil
}

// Close releases the port.
func (q *Queue) Close() {
	if q.maps != nil {
		q.maps.close(q.lab)
	}
	q.c.Close()
}
