package emu

import "github.com/fabric-emu/fabric/internal/units"

// Rates and sizes as the API takes them: 10 * emu.Mbit, 700 * emu.KB. They
// are the types lab files are parsed into, under names another module can
// use; ParseRate and ParseSize read the same strings a lab file accepts.
type (
	Rate = units.Rate // bits per second
	Size = units.Size // bytes
)

// Rates.
const (
	Kbit = units.Kbit
	Mbit = units.Mbit
	Gbit = units.Gbit
)

// Sizes.
const (
	KB  = units.KB
	MB  = units.MB
	GB  = units.GB
	KiB = units.KiB
	MiB = units.MiB
)

// ParseRate reads "100Mbit", "10 Gbps" or "1e9".
func ParseRate(s string) (Rate, error) { return units.ParseRate(s) }

// ParseSize reads "700KB", "1.5MiB" or "1500".
func ParseSize(s string) (Size, error) { return units.ParseSize(s) }
