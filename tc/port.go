package tc

import (
	"fmt"

	"github.com/fabric-emu/fabric/internal/units"
	"github.com/fabric-emu/fabric/internal/yamlfile"
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
	BandOf  [8]uint8     `json:"band_of"`
	ECN     *ECNSpec     `json:"ecn,omitempty"`
	Phantom *PhantomSpec `json:"phantom,omitempty"`
	// Buckets is the number of flow buckets per band (fair queueing,
	// fair.go); 0 means none. Each bucket holds Buffer/Buckets.
	Buckets int `json:"buckets,omitempty"`
	// NDP, when set, makes the port an NDP switch port (ndp.go): two bands,
	// header and data, with NDP's queues instead of Buffer.
	NDP *NDP `json:"ndp,omitempty"`

	unusedBuffer bool // set a buffer that an NDP port does not use (Warnings)
}

// Resolve validates the merged settings of one port against its link:
// unset rate means the link rate; unset buffer means DefaultBuffer. Errors
// are FieldErrors with paths relative to the port spec
// ("marking.ecn.threshold").
func (s PortSettings) Resolve(linkRate units.Rate, mtu int) (Port, error) {
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
	if min := units.Size(mtu + frameOverhead); p.Buffer.BytesAt(mtu) < min {
		return Port{}, yamlfile.Field("buffer", "%s cannot hold one full-size frame (%d bytes at MTU %d)", p.Buffer, uint64(min), mtu)
	}
	if s.Queues != nil {
		bands, err := s.Queues.resolve()
		if err != nil {
			return Port{}, yamlfile.In("queues", err)
		}
		p.Bands = bands
		p.Weights = append([]int(nil), s.Queues.Weights...)
		p.Buckets = s.Queues.buckets()
	}
	if p.Buckets > 0 {
		if err := p.checkBucketBuffer(); err != nil {
			return Port{}, err
		}
	}
	if s.NDP != nil {
		n, err := s.NDP.resolve(mtu)
		if err != nil {
			return Port{}, err
		}
		p.NDP, p.Bands, p.Weights = &n, 2, nil
		p.unusedBuffer = s.Buffer != nil
	}
	p.BandOf = dscpBands(p.Bands)
	if s.Marking != nil {
		if e := s.Marking.ECN; e != nil {
			if b := p.Buffer.BytesAt(mtu); e.Threshold > b {
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

// NeedsPrograms says whether the port needs fabric's eBPF port programs:
// classification into bands or flow buckets, an ECN marker, the phantom
// queue or NDP trimming.
func (p Port) NeedsPrograms() bool { return p.needsProgram() || p.Phantom != nil }

// needsProgram says whether the port needs the eBPF egress program:
// classification into bands or flow buckets, the ECN threshold marker, or
// NDP trimming.
func (p Port) needsProgram() bool {
	return p.Bands > 1 || p.ECN != nil || p.Buckets > 0 || p.NDP != nil
}

// BufferBytes is the per-band drop-tail limit in bytes (with flow buckets,
// the band's: its buckets share it).
func (p Port) BufferBytes() units.Size { return p.Buffer.BytesAt(p.MTU) }

// Warnings lists settings that are legal but doubtful on this machine, such
// as a rate above what one CPU core can push through a shaped hop.
func (p Port) Warnings() []string {
	var w []string
	if p.Rate > MeasuredMaxRate {
		w = append(w, fmt.Sprintf("rate %s is above %s, the highest rate at which one flow filled a shaped hop on the project machine (tc BenchmarkSingleFlowMaxRate); results at this rate measure the CPU, not the port",
			p.Rate, MeasuredMaxRate))
	}
	if p.unusedBuffer {
		w = append(w, fmt.Sprintf("buffer %s is not used by an NDP port: its queues are ndp.data (%s) and ndp.header (%s)",
			p.Buffer, p.NDP.Data, p.NDP.Header))
	}
	return w
}
