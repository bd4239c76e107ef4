package tc

import (
	"github.com/fabric-emu/fabric/internal/units"
)

// MeasuredMaxRate is the highest port rate at which one TCP flow of
// 1500-byte frames reliably reached 90 % of the rate through one shaped
// hop on the project machine (2 shared cores, offloads off), measured by
// BenchmarkSingleFlowMaxRate; at it single runs already fall short at
// times. Above it the CPU, not the port, sets the pace, so ports above it
// get a warning, not an error.
const MeasuredMaxRate = 1 * units.Gbit
