package pacer

import (
	"time"

	"github.com/fabric-emu/fabric/internal/units"
	"github.com/fabric-emu/fabric/internal/yamlfile"
)

// Config is a host's `pacer:` section in a lab file. Zero fields take the
// defaults below; Resolve fills them in and validates.
//
//	pacer: {rate_interval: 1ms, eta: 0.125, beta: 250, p_assoc: 0.125, idle_timeout: 10ms}
type Config struct {
	// RateInterval is T_r, how often the rate controller runs.
	RateInterval time.Duration `yaml:"rate_interval,omitempty" json:"rate_interval,omitempty"`
	// Eta is η, the weight of the newest rate sample.
	Eta float64 `yaml:"eta,omitempty" json:"eta,omitempty"`
	// Beta is β (1/s), how hard a backlog in the bucket pushes the rate up.
	Beta float64 `yaml:"beta,omitempty" json:"beta,omitempty"`
	// PAssoc is p_a, the chance that one ECE ACK associates its flow.
	PAssoc float64 `yaml:"p_assoc,omitempty" json:"p_assoc,omitempty"`
	// IdleTimeout is T_i: an association ends after this long without a packet.
	IdleTimeout time.Duration `yaml:"idle_timeout,omitempty" json:"idle_timeout,omitempty"`
	// LineRate is the host NIC's rate: the most the bucket may be set to, and
	// the rate of unpaced traffic when the pacer has to create the NIC's HTB
	// root itself. Zero: taken from the NIC's existing HTB tree.
	LineRate units.Rate `yaml:"line_rate,omitempty" json:"line_rate,omitempty"`
	// MinRate is the least the bucket is set to, so that a flow associated
	// after a quiet period is not starved while the controller catches up.
	MinRate units.Rate `yaml:"min_rate,omitempty" json:"min_rate,omitempty"`
	// Buffer is the bucket's FIFO (drop-tail) size.
	Buffer units.Size `yaml:"buffer,omitempty" json:"buffer,omitempty"`
	// Burst is the bucket depth: tokens that may accumulate while idle.
	Burst units.Size `yaml:"burst,omitempty" json:"burst,omitempty"`
	// Flows is the size of the flow association table.
	Flows int `yaml:"flows,omitempty" json:"flows,omitempty"`
}

// Paper values (HULL Table 3 and §5.1) and how fabric adapts them.
const (
	// PaperRateInterval is T_r of the NetFPGA pacer. A Go loop reading
	// netlink counters cannot run every 64 µs; DefaultRateInterval is what
	// it keeps up with on a loaded 2-core machine.
	PaperRateInterval   = 64 * time.Microsecond
	DefaultRateInterval = time.Millisecond
	DefaultEta          = 0.125
	// PaperBeta is β at T_r = 64 µs. The β·Q term is added once per
	// interval, so the rate climbs by β·Q/T_r per second of backlog. To
	// drain a backlog as fast as the paper's pacer with a longer interval, β
	// scales with T_r: DefaultBeta(T_r) = 16·T_r/64 µs (250 at 1 ms).
	PaperBeta          = 16.0
	DefaultPAssoc      = 0.125
	DefaultIdleTimeout = 10 * time.Millisecond
	// The NetFPGA pacer's FIFO is 128 KB and its bucket depth 3 KB (§5.1).
	DefaultBuffer = 128 * units.Size(1000)
	DefaultBurst  = 3 * units.Size(1000)
	// The NetFPGA flow association table holds 64 entries (§5.1).
	DefaultFlows = 64
)

// DefaultBeta is the paper's β rescaled to rate interval tr.
func DefaultBeta(tr time.Duration) float64 {
	return PaperBeta * float64(tr) / float64(PaperRateInterval)
}

// minInterval is the shortest T_r accepted: below it the loop spends its
// time in netlink and its ticks drift.
const minInterval = 200 * time.Microsecond

// Resolve returns c with defaults filled in, or a yamlfile.FieldError naming
// the offending field (relative to the pacer section).
func (c Config) Resolve() (Config, error) {
	c = Config{
		RateInterval: DefaultRateInterval, Eta: DefaultEta, PAssoc: DefaultPAssoc,
		IdleTimeout: DefaultIdleTimeout, Buffer: DefaultBuffer, Burst: DefaultBurst, Flows: DefaultFlows,
	}.Merge(c)
	if c.Beta == 0 { // its default depends on the interval
		c.Beta = DefaultBeta(c.RateInterval)
	}
	switch {
	case c.RateInterval < minInterval:
		return c, yamlfile.Field("rate_interval", "%v is shorter than a userspace loop can keep (at least %v)", c.RateInterval, minInterval)
	case c.Eta < 0 || c.Eta > 1:
		return c, yamlfile.Field("eta", "must be in (0, 1], got %g", c.Eta)
	case c.Beta < 0:
		return c, yamlfile.Field("beta", "must not be negative, got %g", c.Beta)
	case c.PAssoc < 0 || c.PAssoc > 1:
		return c, yamlfile.Field("p_assoc", "must be in (0, 1], got %g", c.PAssoc)
	case c.IdleTimeout < 0:
		return c, yamlfile.Field("idle_timeout", "must be positive, got %v", c.IdleTimeout)
	case c.Flows < 1 || c.Flows > 1<<16:
		return c, yamlfile.Field("flows", "must be between 1 and 65536, got %d", c.Flows)
	case c.Burst < 1600:
		return c, yamlfile.Field("burst", "must hold a full frame (at least 1600B), got %v", c.Burst)
	case c.Buffer < c.Burst:
		return c, yamlfile.Field("buffer", "must be at least burst (%v), got %v", c.Burst, c.Buffer)
	case c.LineRate != 0 && c.MinRate > c.LineRate:
		return c, yamlfile.Field("min_rate", "%v is above line_rate %v", c.MinRate, c.LineRate)
	}
	return c, nil
}

// Merge returns c with every field that top sets replaced by top's, so a
// host's own pacer section can change one parameter of the lab's.
func (c Config) Merge(top Config) Config {
	override(&c.RateInterval, top.RateInterval)
	override(&c.Eta, top.Eta)
	override(&c.Beta, top.Beta)
	override(&c.PAssoc, top.PAssoc)
	override(&c.IdleTimeout, top.IdleTimeout)
	override(&c.LineRate, top.LineRate)
	override(&c.MinRate, top.MinRate)
	override(&c.Buffer, top.Buffer)
	override(&c.Burst, top.Burst)
	override(&c.Flows, top.Flows)
	return c
}

// override sets *dst to v when v is set (not the zero value).
func override[T comparable](dst *T, v T) {
	var zero T
	if v != zero {
		*dst = v
	}
}
