// Package lmm is fabric's Latency Measurement Module (HULL §5.2): it measures
// every packet's latency through one switch from two captures, one on the
// switch's ingress port(s) and one on its egress port.
//
// HULL's NetFPGA stamped a packet before the switch and again after it. Here
// the kernel stamps a packet when the switch namespace receives it on the
// ingress veth and when the port's qdisc releases it on the egress veth; all
// namespaces read one kernel clock, so the difference is the switch latency
// (forwarding cost plus queueing) to the kernel's timestamp resolution.
//
// Matching streams both captures merged in timestamp order and keeps only a
// window of packets that have arrived but not yet left, so memory is bounded
// by the window, not the capture length. An ingress packet that has not left
// within the window is counted as unmatched, never ignored.
//
// Capture the ingress port(s) with direction "in" and the egress port with
// direction "out" (capture.In / capture.Out): a packet leaving through an
// ingress port would otherwise wait for a departure that never comes.
package lmm

import (
	"fmt"
	"slices"
	"time"

	"github.com/fabric-emu/fabric/results/stats"
)

// Mode selects which packets are matched.
type Mode int

const (
	// AllPackets matches every IPv4 packet.
	AllPackets Mode = iota
	// Probes matches only the probe stream: HULL §5.2's 1500-byte packet
	// every 1 ms, sent by the endpoint engine as UDP.
	Probes
)

func (m Mode) String() string {
	if m == Probes {
		return "probes"
	}
	return "all"
}

// ProbeSelector recognises probe packets in Probes mode.
type ProbeSelector struct {
	// MinIPLen is the smallest IP total length of a probe. HULL's probe is a
	// full 1500-byte packet, so the default 1400 keeps probes and rejects
	// the small UDP of other traffic.
	MinIPLen uint16
	// DstPort, if non-zero, is the probes' UDP destination port.
	DstPort uint16
}

func (p ProbeSelector) selects(h *header) bool {
	if h.key.Proto != 17 || h.ipLen < p.MinIPLen {
		return false
	}
	return p.DstPort == 0 || h.key.DPort == p.DstPort
}

// DefaultWindow is how long an ingress packet may wait for its departure.
// A port's worst queueing delay is its buffer over its rate (700 KB at
// 100 Mbit is 56 ms), so one second is far beyond any real latency while
// keeping memory bounded.
const DefaultWindow = time.Second

// Config tunes a Matcher.
type Config struct {
	Mode Mode
	// Probe recognises the probe stream: in Probes mode only its packets
	// are matched; in AllPackets mode, with a DstPort set, its packets are
	// also summarised on their own (Result.Probe). Zero MinIPLen means 1400.
	Probe  ProbeSelector
	Window time.Duration // zero means DefaultWindow
	// Packets, if set, receives one CSV row per matched packet, streamed.
	Packets *PacketWriter
}

// Counts is what happened to every packet the matcher saw. Nothing is
// dropped silently: every frame lands in exactly one counter.
type Counts struct {
	Matched int64 `json:"matched"`
	// Unmatched are ingress packets that never left through the egress port
	// within the window although their destination was seen there: the
	// switch dropped them.
	Unmatched int64 `json:"unmatched"`
	// OtherPort are unmatched ingress packets whose destination never
	// appeared at the egress port: routed elsewhere, not dropped.
	OtherPort int64 `json:"other_port"`
	// EgressOnly are egress packets with no ingress record (traffic from
	// another port, or sent before the ingress capture started).
	EgressOnly int64 `json:"egress_only"`
	// OutsideEgress are unmatched ingress packets that arrived before the
	// egress capture's first packet or after its last: captures start and
	// stop one after another, so their departures were not recorded.
	// Neither matched nor dropped.
	OutsideEgress int64 `json:"outside_egress"`
	// Duplicates are ingress packets whose key repeated while the first was
	// still pending; the earlier one is counted here, not matched, because
	// which departure belongs to which is ambiguous.
	Duplicates int64 `json:"duplicates"`
	// Skipped frames are not IPv4, or not probes in Probes mode.
	Skipped int64 `json:"skipped"`
	// Truncated frames were too short to key (snap length too small).
	Truncated int64 `json:"truncated"`
	// Reordered are egress timestamps earlier than their ingress timestamp;
	// they cannot happen with one kernel clock and are flagged, not matched.
	Reordered int64 `json:"reordered"`
}

// pending is an ingress packet waiting for its departure.
type pending struct {
	ts  int64
	gen uint64 // tells a live map entry from a stale FIFO entry
}

type fifoEntry struct {
	key Key
	ts  int64
	gen uint64
}

// Matcher pairs ingress and egress observations. Feed it packets in
// non-decreasing timestamp order across both sides (Match does that from
// files); call Finish at the end.
type Matcher struct {
	cfg      Config
	window   int64
	waiting  map[Key]pending
	fifo     []fifoEntry // ingress order, for eviction
	head     int
	gen      uint64
	egressTo map[uint32]struct{} // destinations seen at the egress port
	// firstEgress and lastEgress bound the egress capture (ns); 0 before
	// the first egress packet.
	firstEgress, lastEgress int64
	counts                  Counts
	latency                 []float64 // ns, every matched packet
	probe                   *probeTally
}

// probeTally is the probe stream's share of an AllPackets match.
type probeTally struct {
	latency []float64 // ns, every matched probe
	lost    int64     // probes the switch dropped
}

// NewMatcher returns a matcher with cfg's defaults filled in.
func NewMatcher(cfg Config) *Matcher {
	if cfg.Window <= 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.Probe.MinIPLen == 0 {
		cfg.Probe.MinIPLen = 1400
	}
	m := &Matcher{
		cfg:      cfg,
		window:   int64(cfg.Window),
		waiting:  make(map[Key]pending, 1<<12),
		egressTo: make(map[uint32]struct{}),
	}
	if cfg.Mode == AllPackets && cfg.Probe.DstPort != 0 {
		m.probe = &probeTally{}
	}
	return m
}

// isProbe tells whether an AllPackets match tallies k's packet as a probe
// too: its UDP port names the stream, whatever its size.
func (m *Matcher) isProbe(k Key) bool {
	return m.probe != nil && k.Proto == 17 && k.DPort == m.cfg.Probe.DstPort
}

// key parses a frame and applies the mode; ok is false when the frame was
// counted as skipped or truncated.
func (m *Matcher) key(frame []byte) (header, bool) {
	h, why := parseFrame(frame)
	return m.accept(h, why)
}

// accept applies the parse result and the mode, counting rejects.
func (m *Matcher) accept(h header, why parseReason) (header, bool) {
	switch {
	case why == truncated:
		m.counts.Truncated++
		return h, false
	case why == notIPv4:
		m.counts.Skipped++
		return h, false
	case m.cfg.Mode == Probes && !m.cfg.Probe.selects(&h):
		m.counts.Skipped++
		return h, false
	}
	return h, true
}

// Ingress records a frame entering the switch at time ts (ns).
func (m *Matcher) Ingress(ts int64, frame []byte) {
	h, why := parseFrame(frame)
	m.ingress(ts, h, why)
}

func (m *Matcher) ingress(ts int64, h header, why parseReason) {
	m.expire(ts)
	h, ok := m.accept(h, why)
	if !ok {
		return
	}
	if _, dup := m.waiting[h.key]; dup {
		m.counts.Duplicates++
	}
	m.gen++
	m.waiting[h.key] = pending{ts: ts, gen: m.gen}
	m.fifo = append(m.fifo, fifoEntry{key: h.key, ts: ts, gen: m.gen})
}

// Egress records a frame leaving the switch at time ts (ns).
func (m *Matcher) Egress(ts int64, frame []byte) error {
	h, why := parseFrame(frame)
	return m.egress(ts, h, why)
}

func (m *Matcher) egress(ts int64, h header, why parseReason) error {
	m.expire(ts)
	h, ok := m.accept(h, why)
	if !ok {
		return nil
	}
	if _, seen := m.egressTo[h.key.Dst]; !seen {
		m.egressTo[h.key.Dst] = struct{}{}
	}
	if m.firstEgress == 0 {
		m.firstEgress = ts
	}
	m.lastEgress = ts
	p, found := m.waiting[h.key]
	if !found {
		m.counts.EgressOnly++
		return nil
	}
	delete(m.waiting, h.key)
	lat := ts - p.ts
	if lat < 0 {
		m.counts.Reordered++
		return nil
	}
	m.counts.Matched++
	m.latency = append(m.latency, float64(lat))
	if m.isProbe(h.key) {
		m.probe.latency = append(m.probe.latency, float64(lat))
	}
	if m.cfg.Packets != nil {
		m.cfg.Packets.add(p.ts, ts, &h)
	}
	return nil
}

// expire moves ingress packets older than the window out of the waiting set.
func (m *Matcher) expire(now int64) {
	limit := now - m.window
	for m.head < len(m.fifo) && m.fifo[m.head].ts < limit {
		m.evict(m.fifo[m.head])
		m.head++
	}
	// Reuse the FIFO's storage once most of it is consumed.
	if m.head > 1<<16 && m.head*2 > len(m.fifo) {
		n := copy(m.fifo, m.fifo[m.head:])
		m.fifo = m.fifo[:n]
		m.head = 0
	}
}

func (m *Matcher) evict(e fifoEntry) {
	p, ok := m.waiting[e.key]
	if !ok || p.gen != e.gen {
		// Matched already, or superseded by a duplicate (counted in
		// Duplicates when it arrived): nothing left to count.
		return
	}
	delete(m.waiting, e.key)
	_, seen := m.egressTo[e.key.Dst]
	switch {
	case m.firstEgress == 0 || e.ts < m.firstEgress || e.ts > m.lastEgress:
		m.counts.OutsideEgress++
	case seen:
		m.counts.Unmatched++
		if m.isProbe(e.key) {
			m.probe.lost++
		}
	default:
		m.counts.OtherPort++
	}
}

// Result is the outcome of one match.
type Result struct {
	Mode   string        `json:"mode"`
	Counts Counts        `json:"counts"`
	NS     stats.Summary `json:"latency_ns"` // switch latency statistics, nanoseconds
	// Probe is the probe stream's own latency in an AllPackets match with
	// a probe port; nil otherwise. The probes sample the queue at fixed
	// times, so theirs is the time average that HULL's LMM reported,
	// where NS weights each busy moment by the packets it carried.
	Probe  *ProbeResult `json:"probe,omitempty"`
	sorted []float64
}

// ProbeResult is the probe stream's part of a match.
type ProbeResult struct {
	Matched int64         `json:"matched"`
	Lost    int64         `json:"lost"` // dropped at the switch
	NS      stats.Summary `json:"latency_ns"`
}

// Latencies returns every matched packet's latency in ns, ascending.
func (r *Result) Latencies() []float64 { return r.sorted }

// Finish evicts everything still waiting and returns the result. The
// matcher must not be used afterwards.
func (m *Matcher) Finish() (*Result, error) {
	for ; m.head < len(m.fifo); m.head++ {
		m.evict(m.fifo[m.head])
	}
	m.fifo = nil
	if m.cfg.Packets != nil {
		if err := m.cfg.Packets.Flush(); err != nil {
			return nil, fmt.Errorf("lmm: per-packet CSV: %w", err)
		}
	}
	slices.Sort(m.latency)
	r := &Result{
		Mode:   m.cfg.Mode.String(),
		Counts: m.counts,
		NS:     stats.SummarizeSorted(m.latency),
		sorted: m.latency,
	}
	if m.probe != nil {
		slices.Sort(m.probe.latency)
		r.Probe = &ProbeResult{Matched: int64(len(m.probe.latency)), Lost: m.probe.lost, NS: stats.SummarizeSorted(m.probe.latency)}
	}
	return r, nil
}
