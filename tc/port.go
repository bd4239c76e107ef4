package tc

import (
	"fmt"
	"time"

	"fabric/internal/units"
	"fabric/internal/yamlfile"
)

// Port is a validated, fully resolved port configuration: what Apply builds.
type Port struct {
	Rate   units.Rate `json:"rate"`
	MTU    int        `json:"mtu"`
	Buffer Buffer     `json:"buffer"` // per band leaf
	// Bands is the number of leaf queues (1 = a single FIFO). With Weights
	// nil they are strict priorities, band 0 first; otherwise weighted.
	Bands   int   `json:"bands"`
	Weights []int `json:"weights,omitempty"`
	// BandOf maps a DSCP class selector (DSCP >> 3, CS0..CS7) to a band.
	BandOf  [8]uint8      `json:"band_of"`
	ECN     *ECNSpec      `json:"ecn,omitempty"`
	Phantom *PhantomSpec  `json:"phantom,omitempty"`
	Delay   time.Duration `json:"delay,omitempty"`
}

// Resolve validates the merged settings of one port against its link:
// unset rate means the link rate; unset buffer means DefaultBuffer. Errors
// are FieldErrors with paths relative to the port spec
// ("marking.ecn.threshold").
func (s PortSpec) Resolve(linkRate units.Rate, mtu int) (Port, error) {
	if mtu <= 0 {
		mtu = 1500
	}
	p := Port{Rate: linkRate, MTU: mtu, Buffer: Buffer{Bytes: DefaultBuffer}, Bands: 1}
	if err := s.validateLayer(); err != nil {
		return Port{}, err
	}
	if s.Rate != nil {
		p.Rate = *s.Rate
	}
	if p.Rate == 0 {
		return Port{}, yamlfile.Field("rate", "no rate: the link has none and the port sets none")
	}
	if s.Buffer != nil {
		p.Buffer = *s.Buffer
	}
	if min := units.Size(mtu + frameOverhead); p.Buffer.bytesAt(mtu) < min {
		return Port{}, yamlfile.Field("buffer", "%s cannot hold one full-size frame (%d bytes at MTU %d)", p.Buffer, uint64(min), mtu)
	}
	if s.Queues != nil {
		bands, err := s.Queues.resolve()
		if err != nil {
			return Port{}, yamlfile.In("queues", err)
		}
		p.Bands = bands
		p.Weights = append([]int(nil), s.Queues.Weights...)
	}
	p.BandOf = dscpBands(p.Bands)
	if s.Marking != nil {
		if e := s.Marking.ECN; e != nil {
			if b := p.Buffer.bytesAt(mtu); e.Threshold > b {
				return Port{}, thresholdTooLarge(e.Threshold, p.Buffer, b)
			}
			c := *e
			p.ECN = &c
		}
		if ph := s.Marking.Phantom; ph != nil {
			c := *ph
			p.Phantom = &c
		}
	}
	if s.Delay != nil && *s.Delay > 0 {
		if !haveQdisc("netem") {
			return Port{}, yamlfile.Field("delay", "%v needs the netem qdisc, which this kernel does not have (see fabric doctor); remove delay or use a kernel with CONFIG_NET_SCH_NETEM", *s.Delay)
		}
		p.Delay = *s.Delay
	}
	return p, nil
}

// dscpBands is the default classifier: CS7..CS0 map to bands 0..7, clamped
// to the last band, so network control traffic (CS6/CS7) is served first
// and best effort (CS0) last.
func dscpBands(bands int) [8]uint8 {
	var m [8]uint8
	for cs := 0; cs < 8; cs++ {
		m[cs] = uint8(min(7-cs, bands-1))
	}
	return m
}

// needsProgram says whether the port needs the eBPF egress program:
// classification into bands or the ECN threshold marker.
func (p Port) needsProgram() bool { return p.Bands > 1 || p.ECN != nil }

// BufferBytes is the per-band drop-tail limit in bytes.
func (p Port) BufferBytes() units.Size { return p.Buffer.bytesAt(p.MTU) }

// Warnings lists settings that are legal but doubtful on this machine, such
// as a rate above what one CPU core can push through a shaped hop.
func (p Port) Warnings() []string {
	var w []string
	if p.Rate > MeasuredMaxRate {
		w = append(w, fmt.Sprintf("rate %s is above %s, the highest rate at which one flow filled a shaped hop on the project machine (tc BenchmarkSingleFlowMaxRate); results at this rate measure the CPU, not the port",
			p.Rate, MeasuredMaxRate))
	}
	return w
}
