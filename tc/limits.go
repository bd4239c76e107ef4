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
// (2 shared cores, offloads off), measured by BenchmarkSingleFlowMaxRate:
// best of two runs, 100 Mbit 100 %, 500 Mbit 89.8 %, 1 Gbit 90.7 %,
// 1.5 Gbit 76.9 %, 2 Gbit 88.3 % (load average 3–4.6 from other work).
// Above it the CPU, not the port, sets the pace; ports above it get a
// warning, not an error.
const MeasuredMaxRate = 1 * units.Gbit
