package tc

import (
	"fmt"
	"slices"

	"github.com/fabric-emu/fabric/internal/units"
	"github.com/fabric-emu/fabric/internal/yamlfile"
)

// NDPSpec turns a port into an NDP switch port (Handley et al., "Re-architecting
// datacenter networks and stacks for low latency and high performance",
// SIGCOMM 2017, §3.1), written under a port's settings:
//
//	ports:
//	  ndp: {data: 8pkts, header: 64pkts, ratio: 10}
//
// Every field is optional (`ndp: {}` is the paper's switch):
//
//   - data: the data queue's bound, in packets ("8pkts") or bytes ("12KB").
//     Default 8 packets: the paper's sensitivity analysis (§6.2, Fig. 17)
//     found 6-packet queues give about 90 % utilization and 8-packet queues
//     over 95 %, and uses 8 throughout.
//   - header: the header queue. Default: as many bytes as the data queue,
//     as the paper's switches have it (NetFPGA: "a low priority and a high
//     priority output queue, each 12KByte long", §4; §3.2.4: "eight 9KB
//     packets and (in the same amount of memory) 1125 64-byte headers").
//     With 1500-byte MTU and 8 packets that is 12112 bytes, 195 trimmed
//     headers.
//   - ratio: headers served per data packet when both queues are backlogged
//     (weighted round robin, §3.1: "a 10:1 ratio of headers to packets").
//     Default 10.
//
// An NDP port has exactly two bands: band 0 the header queue, band 1 the
// data queue; `queues:` may say so (bands: 2, or weights: [ratio, 1]) but
// not otherwise, and may not ask for fair queueing. It does not mark ECN
// (it trims instead) and it does not use `buffer:` (its queues are data
// and header). What the port does with packets is in doc.go ("NDP ports").
type NDPSpec struct {
	Data   *Buffer `yaml:"data,omitempty" json:"data,omitempty"`
	Header *Buffer `yaml:"header,omitempty" json:"header,omitempty"`
	Ratio  int     `yaml:"ratio,omitempty" json:"ratio,omitempty"`
}

// NDP is a resolved NDP port: its two queues and the service ratio.
type NDP struct {
	Data   Buffer `json:"data"`
	Header Buffer `json:"header"`
	Ratio  int    `json:"ratio"`
}

// The NDP packet format fabric's switch and NDP transport share: NDP over
// UDP, the UDP payload starting with a 20-byte NDP header whose byte 0 is
// NDPMagic and byte 1 the flags. DATA packets carry DSCP 0, control packets
// (ACK, NACK, PULL) DSCP CS7.
const (
	NDPMagic     = 0x4E // 'N'
	NDPHeaderLen = 20

	NDPFlagData    = 0x01
	NDPFlagAck     = 0x02
	NDPFlagNack    = 0x04
	NDPFlagPull    = 0x08
	NDPFlagChopped = 0x10 // set by the switch on a trimmed packet
	NDPFlagLast    = 0x20
	NDPFlagPrio    = 0x40

	// NDPTrimmedLen is the IP length of a trimmed packet: IPv4 without
	// options (20) + UDP (8) + NDP (20).
	NDPTrimmedLen = 20 + 8 + NDPHeaderLen
	// DSCPHeader is the DSCP of NDP control packets and trimmed headers.
	DSCPHeader = 56 // CS7
)

const (
	// DefaultNDPDataPackets is the data queue's default bound (NDP §6.2).
	DefaultNDPDataPackets = 8
	// DefaultNDPRatio is headers served per data packet (NDP §3.1).
	DefaultNDPRatio = 10
	// maxNDPRatio bounds ratio so that the header quantum stays sane.
	maxNDPRatio = 1000

	ndpHeaderBand = 0
	ndpDataBand   = 1
	// ndpHeaderFrame is a trimmed header (or a control packet) on a veth:
	// the bytes HTB charges for it.
	ndpHeaderFrame = NDPTrimmedLen + frameOverhead
)

// validateNDP checks an NDP port's settings against the rest of its
// settings: the layer's own (validateLayer) and, from Resolve, the merged
// result, so that a conflict between layers is caught too.
func (s PortSettings) validateNDP() error {
	n := s.NDP
	if n.Ratio < 0 || n.Ratio > maxNDPRatio {
		return yamlfile.Field("ndp.ratio", "headers served per data packet: want 1..%d (NDP uses %d), got %d", maxNDPRatio, DefaultNDPRatio, n.Ratio)
	}
	if n.Data != nil && n.Data.Packets == 0 && n.Data.Bytes < units.Size(ndpHeaderFrame) {
		return yamlfile.Field("ndp.data", "%s cannot hold one packet", *n.Data)
	}
	if n.Header != nil && n.Header.Packets == 0 && n.Header.Bytes < units.Size(ndpHeaderFrame) {
		return yamlfile.Field("ndp.header", "%s cannot hold one trimmed header (%d bytes)", *n.Header, ndpHeaderFrame)
	}
	if m := s.Marking; m != nil && (m.ECN != nil || m.Phantom != nil) {
		return yamlfile.Field("marking", "an NDP port trims packets instead of marking them (NDP §3.1): remove marking or ndp")
	}
	if s.Queues != nil {
		return yamlfile.In("queues", s.Queues.checkNDP(n.ratio()))
	}
	return nil
}

// checkNDP says whether queues agrees with an NDP port's two bands.
func (q *QueuesSpec) checkNDP(ratio int) error {
	switch {
	case q.Bands != 0 && q.Bands < 2:
		return yamlfile.Field("bands", "an NDP port needs two bands, a header band and a data band; got %d", q.Bands)
	case q.Bands > 2:
		return yamlfile.Field("bands", "an NDP port has exactly two bands (header, data); got %d", q.Bands)
	case len(q.Weights) > 0 && !slices.Equal(q.Weights, []int{ratio, 1}):
		return yamlfile.Field("weights", "%v conflicts with ndp: an NDP port serves %d headers to 1 data packet (ndp.ratio); give weights [%d, 1] or none", q.Weights, ratio, ratio)
	case q.Fair:
		return yamlfile.Field("fair", "an NDP port's data queue holds a few packets and cannot be split into flow buckets: remove fair or ndp")
	}
	return nil
}

func (n *NDPSpec) ratio() int {
	if n.Ratio == 0 {
		return DefaultNDPRatio
	}
	return n.Ratio
}

// resolve fills in the defaults for a link of the given MTU.
func (n *NDPSpec) resolve(mtu int) (NDP, error) {
	out := NDP{Data: Buffer{Packets: DefaultNDPDataPackets}, Ratio: n.ratio()}
	if n.Data != nil {
		out.Data = *n.Data
	}
	if b := out.Data.BytesAt(mtu); out.Data.Packets == 0 && b < units.Size(mtu+frameOverhead) {
		return NDP{}, yamlfile.Field("ndp.data", "%s cannot hold one full-size frame (%d bytes at MTU %d)", out.Data, mtu+frameOverhead, mtu)
	}
	out.Header = Buffer{Bytes: out.Data.BytesAt(mtu)}
	if n.Header != nil {
		out.Header = *n.Header
	}
	return out, nil
}

// ndpShare is an NDP band's HTB class. Both bands have the same priority
// and a token guaranteed rate, so that both always borrow the port from
// class 1:1 and HTB serves them by deficit round robin with their quanta.
// HTB's DRR (htb_dequeue_tree) sends a packet from the class under its
// pointer, takes the packet's length from the class's deficit, and only
// when the deficit goes negative adds the quantum and moves on. With the
// header quantum ratio × 62 bytes (a trimmed header or an NDP control
// packet on the wire) the header band sends ratio headers per turn; with
// the data quantum one full-size frame the data band sends one full-size
// packet per turn: ratio : 1, as the paper's switch (§3.1). Packets of
// other sizes are served in bytes: over a turn the header band gets
// ratio × 62 bytes and the data band one frame's worth (shorter data
// packets: more than one per turn).
func (p Port) ndpShare(b int) classShare {
	rate := max(p.Rate.BitsPerSecond()/1000, 8000)
	if b == ndpHeaderBand {
		return classShare{rate: rate, quantum: uint32(p.NDP.Ratio * ndpHeaderFrame)}
	}
	return classShare{rate: rate, quantum: uint32(p.MTU + frameOverhead)}
}

// ndpLimit is the fifo of NDP band b.
func (p Port) ndpLimit(b int) Buffer {
	if b == ndpHeaderBand {
		return p.NDP.Header
	}
	return p.NDP.Data
}

// ndpCaps are the limits port_egress counts the bands against: exactly the
// fifo limits, so that the data band is full for trimming exactly when its
// fifo is. The count is never below the fifo's real queue (a packet is
// counted before it reaches the qdisc and leaves the count after it has
// left the qdisc), so the data fifo never overflows.
func (p Port) ndpCaps(cfg *portPortCfg) {
	for b := range 2 {
		l := p.ndpLimit(b)
		if l.Packets > 0 {
			cfg.CapPkts[b] = uint32(l.Packets)
		} else {
			cfg.CapBytes[b] = uint32(l.Bytes)
		}
	}
}

// NDPStats are an NDP port's counters.
type NDPStats struct {
	// Trimmed is DATA packets cut to their headers because the data queue
	// was full.
	Trimmed uint64 `json:"trimmed"`
	// HeaderDrops is packets the header queue had no room for (its fifo's
	// drops): trimmed headers and control packets lost.
	HeaderDrops uint64 `json:"header_drops"`
	// DataDrops is packets the data queue dropped: non-NDP packets of the
	// data band that found it full, and DATA packets that could neither be
	// queued nor trimmed (TrimFailed).
	DataDrops  uint64 `json:"data_drops"`
	TrimFailed uint64 `json:"trim_failed,omitempty"`
	// DataQueue is the data queue as the port program counts it (packets
	// and bytes), DataQueueMax its peak; tc's backlog of band 1 is the
	// kernel's view of the same queue.
	DataQueue      uint64 `json:"data_queue_packets"`
	DataQueueBytes uint64 `json:"data_queue_bytes"`
	DataQueueMax   uint64 `json:"data_queue_max_packets"`
	// Packets is every packet the port program saw (after trimming, a
	// trimmed packet counts once).
	Packets uint64 `json:"packets"`
}

// ndpStats reads an NDP port's counters from its state; the fifo drops are
// added by Stats from the qdisc dump.
func ndpStats(s *portPortState) *NDPStats {
	q := countedQueue(s, ndpDataBand)
	return &NDPStats{
		Trimmed: s.Trimmed, TrimFailed: s.TrimFailed, DataDrops: s.TrimFailed,
		DataQueue: q.pkts, DataQueueBytes: q.bytes, DataQueueMax: s.VqMaxPkts,
		Packets: s.Packets,
	}
}

func (n NDP) String() string {
	return fmt.Sprintf("ndp data %s header %s %d:1", n.Data, n.Header, n.Ratio)
}
