package tc

import (
	"fabric/internal/doctor"
	"fabric/internal/units"
)

// haveQdisc is the kernel capability probe (one throwaway namespace per
// process); a variable so that validation tests can pretend.
var haveQdisc = doctor.HasQdisc

// MeasuredMaxRate is the highest port rate at which one TCP flow still
// reached 90 % of the rate through one shaped hop on the project machine
// (2 cores, offloads off), measured by BenchmarkSingleFlow
// (bench/ports.sh). Above it the CPU, not the port, sets the pace; ports
// above it get a warning, not an error.
const MeasuredMaxRate = 1 * units.Gbit
