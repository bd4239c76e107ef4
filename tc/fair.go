package tc

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"

	"github.com/fabric-emu/fabric/internal/units"
	"github.com/fabric-emu/fabric/internal/yamlfile"
)

// Fair queueing within a band (SWP's "per-traffic class fair queueing";
// docs/ports.md "Settings"). This kernel has no fq,
// sfq or drr, so a fair band is an HTB class with Buckets children, one
// per hashed flow bucket, each with its own fifo:
//
//	1:1b              the band: strict priority or weighted, as without fair
//	1:(b+1)<<8 | i    bucket i of band b: the band's priority, quantum one
//	                  full-size frame, a token guaranteed rate, ceil the port
//	(b+1)<<8 | i:     the bucket's fifo
//
// HTB serves siblings of equal priority by deficit round robin with their
// quanta, so backlogged buckets share their band equally, frame for frame:
// stochastic fair queueing (McKenney, "Stochastic Fairness Queueing",
// INFOCOM 1990), with flows hashed into buckets by the port's eBPF
// program (flow_hash in bpf/port.bpf.c, FlowBucket here). Flows that
// hash into the same bucket share it as a FIFO. There is no periodic
// re-hashing (sfq's perturbation): a flow keeps its bucket, so it is never
// reordered, and two colliding flows collide for their lifetime.
//
// The bands' shares are unchanged: strict priority comes from the buckets'
// priorities (HTB serves leaves in priority order), weights from the
// bands' guaranteed rates (∝ weights, summing to the port rate), which a
// band spends on whichever of its buckets HTB's round robin picks.
//
// A bucket's guaranteed rate is 1000 B/s with a one-frame bucket: HTB lets
// a class with tokens send without asking its parents, so every bucket
// idle for 1.5 s may send one frame ahead of its band's share, and
// no more.
//
// # The buffer
//
// A band's buffer is split equally among its buckets: each bucket's fifo
// holds buffer/buckets (bytes or packets, rounded down), so the band never
// holds more than its buffer, and a flow that floods its bucket loses
// packets from its own bucket only, which is what isolates the others. The
// price: one flow alone in a band can queue only buffer/buckets, not the
// whole buffer (sfq shares one limit among all flows and, when full, drops
// from the longest queue; eBPF at tc egress cannot reach queued packets).
// Size the buffer, or the number of buckets, for the queue one flow needs:
// with the default 150 KB and 16 buckets a bucket holds 9.4 KB, six
// full-size frames.

// DefaultBuckets is the number of flow buckets per band with `fair: true`.
// Buckets trade collisions against buffer: n flows in a band share one of
// N buckets with another flow with probability 1 − (1 − 1/N)^(n−1), 6 % for
// 2 flows in 16 buckets, 18 % for 4 and 36 % for 8, while each bucket
// holds 1/N of the band's buffer, six full-size frames of the default
// 150 KB with N = 16. More buckets leave too little queue per flow for TCP
// at the default buffer; fewer make collisions common.
const DefaultBuckets = 16

// MaxBuckets bounds buckets per band: 8 bands × 64 buckets is 512 HTB
// classes and fifos per port, each a netlink message to build.
const MaxBuckets = 64

// bucketBase is the class minor of bucket 0 of band 0; see the tree above.
const bucketBase = 0x100

// bucketRate is a bucket's guaranteed rate, bytes/s (see above).
const bucketRate = 1000

func bucketClass(band, i int) uint32 {
	return netlink.MakeHandle(rootMajor, uint16(bucketBase*(band+1)+i))
}

func bucketQdisc(band, i int) uint32 { return netlink.MakeHandle(uint16(bucketBase*(band+1)+i), 0) }

// classBand tells which band (and bucket, −1 for a band's own leaf) an HTB
// class minor under the port's root belongs to.
func classBand(minor uint16) (band, bucket int, ok bool) {
	switch {
	case minor >= leafBase && minor < leafBase+MaxBands:
		return int(minor) - leafBase, -1, true
	case minor >= bucketBase && minor < bucketBase*(MaxBands+1) && int(minor&0xff) < MaxBuckets:
		return int(minor>>8) - 1, int(minor & 0xff), true
	}
	return 0, 0, false
}

// checkBuckets validates fair and buckets on their own.
func (q *QueuesSpec) checkBuckets() error {
	switch {
	case q.Buckets != 0 && !q.Fair:
		return yamlfile.Field("buckets", "flow buckets are for fair queueing: add fair: true, or remove buckets")
	case q.Buckets < 0 || q.Buckets == 1 || q.Buckets > MaxBuckets:
		return yamlfile.Field("buckets", "want 2..%d flow buckets per band (default %d), got %d", MaxBuckets, DefaultBuckets, q.Buckets)
	}
	return nil
}

// buckets is the resolved number of buckets per band (0: no fair queueing).
func (q *QueuesSpec) buckets() int {
	switch {
	case !q.Fair:
		return 0
	case q.Buckets == 0:
		return DefaultBuckets
	}
	return q.Buckets
}

// bucketBuffer is each bucket's share of the band's buffer.
func (p Port) bucketBuffer() Buffer {
	if p.Buffer.Packets > 0 {
		return Buffer{Packets: p.Buffer.Packets / p.Buckets}
	}
	return Buffer{Bytes: p.Buffer.Bytes / units.Size(p.Buckets)}
}

// checkBucketBuffer makes sure each bucket holds at least one full-size
// frame.
func (p Port) checkBucketBuffer() error {
	share := p.bucketBuffer()
	if share.Packets > 0 || share.Bytes >= units.Size(p.MTU+frameOverhead) {
		return nil
	}
	return yamlfile.Field("queues.buckets", "a %s buffer split over %d buckets leaves each less than one full-size frame (%d bytes): use fewer buckets or a larger buffer",
		p.Buffer, p.Buckets, p.MTU+frameOverhead)
}

// bucketShare is the HTB class of a bucket of band b.
func (p Port) bucketShare(b int) classShare {
	return classShare{
		rate: bucketRate * 8, prio: p.bandShare(b).prio,
		quantum: uint32(p.MTU + frameOverhead), burst: uint32(p.MTU + frameOverhead),
	}
}

// addBuckets hangs band b's buckets and their fifos under its class.
func (c *nsConn) addBuckets(ifindex, b int, p Port) error {
	share := p.bucketShare(b)
	limit := p.bucketBuffer()
	for i := range p.Buckets {
		if err := c.h.ClassAdd(p.htbClass(ifindex, leafClass(b), bucketClass(b, i), share)); err != nil {
			return fmt.Errorf("htb class %x: %w", bucketClass(b, i)&0xffff, err)
		}
		if err := c.replaceFifo(fifoFor(ifindex, bucketQdisc(b, i), bucketClass(b, i), limit)); err != nil {
			return err
		}
	}
	return nil
}

// FlowBucket is the bucket port_egress puts a packet of this flow in, out
// of buckets (the eBPF flow_hash, computed the same way: Chris Wellons'
// lowbias32 mixer over the addresses, the ports and the protocol, as the
// little-endian machine loads them). Tests use it to choose flows that do
// or do not share a bucket. Ports are ignored for protocols other than TCP
// and UDP, as in the program.
func FlowBucket(src, dst netip.Addr, proto uint8, srcPort, dstPort uint16, buckets int) int {
	if buckets <= 0 {
		return 0
	}
	var h uint32
	if src.Is4() && dst.Is4() {
		s, d := src.As4(), dst.As4()
		h = mix32(mix32(binary.LittleEndian.Uint32(s[:])) ^ binary.LittleEndian.Uint32(d[:]))
	} else {
		s, d := src.As16(), dst.As16()
		for i := 0; i < 16; i += 4 {
			h = mix32(h ^ binary.LittleEndian.Uint32(s[i:]))
		}
		for i := 0; i < 16; i += 4 {
			h = mix32(h ^ binary.LittleEndian.Uint32(d[i:]))
		}
	}
	var ports uint32
	if proto == 6 || proto == 17 {
		var b [4]byte
		binary.BigEndian.PutUint16(b[0:], srcPort)
		binary.BigEndian.PutUint16(b[2:], dstPort)
		ports = binary.LittleEndian.Uint32(b[:])
	}
	return int(mix32(h^ports^uint32(proto)) % uint32(buckets))
}

// mix32 is lowbias32 (github.com/skeeto/hash-prospector), as in
// bpf/port.bpf.c.
func mix32(x uint32) uint32 {
	x ^= x >> 16
	x *= 0x7feb352d
	x ^= x >> 15
	x *= 0x846ca68b
	x ^= x >> 16
	return x
}
