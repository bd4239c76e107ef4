// Package units parses the human quantities that appear in lab and
// experiment files: link rates ("10Gbit", "10 Gbps", "100M"), byte sizes
// ("700KB", "1.5MiB") and durations. Every parser returns a plain error whose
// text can be placed after "field: " in a file:line message.
package units

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode"

	"go.yaml.in/yaml/v3"

	"github.com/fabric-emu/fabric/internal/yamlfile"
)

// Rate is a link or port rate in bits per second.
type Rate uint64

// Common rates.
const (
	Kbit Rate = 1_000
	Mbit Rate = 1_000_000
	Gbit Rate = 1_000_000_000
)

// BitsPerSecond returns r as a plain number.
func (r Rate) BitsPerSecond() uint64 { return uint64(r) }

// BytesPerSecond returns r / 8.
func (r Rate) BytesPerSecond() float64 { return float64(r) / 8 }

// String prints the rate in the largest unit that keeps it integral, the way
// tc does ("100Mbit", "1Gbit", "950Mbit").
func (r Rate) String() string {
	switch {
	case r == 0:
		return "0bit"
	case r%Gbit == 0:
		return fmt.Sprintf("%dGbit", r/Gbit)
	case r%Mbit == 0:
		return fmt.Sprintf("%dMbit", r/Mbit)
	case r%Kbit == 0:
		return fmt.Sprintf("%dKbit", r/Kbit)
	}
	return fmt.Sprintf("%dbit", uint64(r))
}

// rateUnits maps a lower-cased unit to its multiplier in bit/s. Both tc's
// spelling ("mbit") and the common "Mbps" are accepted; a bare "M" or "G"
// means bits, as in iperf. Byte rates ("MBps") are rejected on purpose:
// confusing them with bit rates is the commonest mistake in lab files.
var rateUnits = map[string]float64{
	"": 1, "bit": 1, "bps": 1, "b/s": 1,
	"k": 1e3, "kbit": 1e3, "kbps": 1e3, "kb/s": 1e3,
	"m": 1e6, "mbit": 1e6, "mbps": 1e6, "mb/s": 1e6,
	"g": 1e9, "gbit": 1e9, "gbps": 1e9, "gb/s": 1e9,
	"t": 1e12, "tbit": 1e12, "tbps": 1e12,
}

// ParseRate parses a rate such as "10Gbit", "10 Gbps", "950Mbit" or "1e9".
func ParseRate(s string) (Rate, error) {
	num, unit, err := splitNumber(s)
	if err != nil {
		return 0, fmt.Errorf("rate %q: %w (want e.g. 100Mbit, 10 Gbps)", s, err)
	}
	if strings.Contains(unit, "B") {
		return 0, fmt.Errorf("rate %q: %q is a byte rate; write bits (e.g. 800Mbit for 100MB/s)", s, unit)
	}
	mult, ok := rateUnits[strings.ToLower(unit)]
	if !ok {
		return 0, fmt.Errorf("rate %q: unknown unit %q (want bit, Kbit, Mbit, Gbit or Mbps/Gbps)", s, unit)
	}
	v := num * mult
	if v < 1 || v > 1e13 {
		return 0, fmt.Errorf("rate %q: out of range (1bit..10Tbit)", s)
	}
	return Rate(math.Round(v)), nil
}

// Size is a byte count.
type Size uint64

// Common sizes. K/M/G are decimal (as in the papers: "30KB" = 30,000 bytes);
// KiB/MiB/GiB are binary.
const (
	KB  Size = 1_000
	MB  Size = 1_000_000
	GB  Size = 1_000_000_000
	KiB Size = 1 << 10
	MiB Size = 1 << 20
)

func (s Size) String() string {
	switch {
	case s == 0:
		return "0B"
	case s%MB == 0:
		return fmt.Sprintf("%dMB", s/MB)
	case s%KB == 0:
		return fmt.Sprintf("%dKB", s/KB)
	}
	return fmt.Sprintf("%dB", uint64(s))
}

var sizeUnits = map[string]float64{
	"": 1, "b": 1, "byte": 1, "bytes": 1,
	"k": 1e3, "kb": 1e3, "kib": 1 << 10,
	"m": 1e6, "mb": 1e6, "mib": 1 << 20,
	"g": 1e9, "gb": 1e9, "gib": 1 << 30,
}

// ParseSize parses a byte size such as "700KB", "1.5MB", "64KiB" or "1500".
func ParseSize(s string) (Size, error) {
	num, unit, err := splitNumber(s)
	if err != nil {
		return 0, fmt.Errorf("size %q: %w (want e.g. 30KB, 1MB)", s, err)
	}
	mult, ok := sizeUnits[strings.ToLower(unit)]
	if !ok {
		return 0, fmt.Errorf("size %q: unknown unit %q (want B, KB, MB, GB, KiB, MiB)", s, unit)
	}
	v := num * mult
	if v < 0 || v > 1e15 {
		return 0, fmt.Errorf("size %q: out of range", s)
	}
	return Size(math.Round(v)), nil
}

// splitNumber splits "10 Gbps" into 10 and "Gbps".
func splitNumber(s string) (float64, string, error) {
	t := strings.TrimSpace(s)
	i := strings.IndexFunc(t, func(r rune) bool {
		return !(unicode.IsDigit(r) || r == '.' || r == 'e' || r == 'E' || r == '+' || r == '-')
	})
	// "1e9" is a number; "1Gbit" splits before G. An 'e' that ends the
	// numeric part (as in "5e") would be ambiguous, so numbers with
	// exponents must be followed by digits.
	numPart, unit := t, ""
	if i >= 0 {
		numPart, unit = t[:i], strings.TrimSpace(t[i:])
	}
	if numPart == "" {
		return 0, "", fmt.Errorf("no number")
	}
	v, err := strconv.ParseFloat(numPart, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, "", fmt.Errorf("not a number")
	}
	return v, unit, nil
}

// UnmarshalYAML accepts "100Mbit", "10 Gbps" or a plain number of bits/s,
// and reports a bad value with its line so the loader can name the field.
func (r *Rate) UnmarshalYAML(n *yaml.Node) error {
	v, err := ParseRate(n.Value)
	if err != nil {
		return yamlfile.LineError(n, "%v", err)
	}
	*r = v
	return nil
}

// MarshalYAML writes the rate the way it is read.
func (r Rate) MarshalYAML() (any, error) { return r.String(), nil }

// UnmarshalYAML accepts "30KB", "1.5MB" or a plain number of bytes.
func (s *Size) UnmarshalYAML(n *yaml.Node) error {
	v, err := ParseSize(n.Value)
	if err != nil {
		return yamlfile.LineError(n, "%v", err)
	}
	*s = v
	return nil
}

// MarshalYAML writes the size the way it is read.
func (s Size) MarshalYAML() (any, error) { return s.String(), nil }

// MarshalText lets rates appear as strings in JSON state and meta files.
func (r Rate) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// UnmarshalText is MarshalText's inverse.
func (r *Rate) UnmarshalText(b []byte) error {
	v, err := ParseRate(string(b))
	*r = v
	return err
}

// MarshalText lets sizes appear as strings in JSON.
func (s Size) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText is MarshalText's inverse.
func (s *Size) UnmarshalText(b []byte) error {
	v, err := ParseSize(string(b))
	*s = v
	return err
}
