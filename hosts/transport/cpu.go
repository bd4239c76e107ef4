package transport

import (
	"time"

	"golang.org/x/sys/unix"
)

// CPUTime is the CPU time this process has used, user and system: what
// fabric's own transports report as cpu_us in their stats line.
func CPUTime() time.Duration {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
