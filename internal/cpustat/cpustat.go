// Package cpustat reads the machine's cumulative CPU times from /proc/stat,
// for the fidelity monitor and for tests that judge a run by the CPU it
// had. One parser, so that every judge counts idle and steal alike.
package cpustat

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Times are the machine-wide cumulative CPU times, in jiffies, from the
// aggregate "cpu" line of /proc/stat.
type Times struct {
	// Idle is idle plus iowait: time no task wanted the CPU.
	Idle uint64
	// Steal is time the hypervisor ran something else while this machine
	// had work: a virtual machine's CPU that no setting of a lab gives
	// back, and the cause of stalls that look like lateness.
	Steal uint64
	// Total is the sum of user, nice, system, idle, iowait, irq, softirq
	// and steal. Guest time is left out: the kernel already counts it in
	// user.
	Total uint64
}

// Read returns the current times.
func Read() (Times, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return Times{}, err
	}
	return parse(string(b))
}

// parse reads the first line of a /proc/stat text.
func parse(s string) (Times, error) {
	line, _, _ := strings.Cut(s, "\n")
	fields := strings.Fields(line)
	if len(fields) < 5 || fields[0] != "cpu" {
		return Times{}, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var t Times
	// user nice system idle iowait irq softirq steal guest guest_nice
	for i, f := range fields[1:] {
		if i >= 8 {
			break
		}
		v, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return Times{}, fmt.Errorf("/proc/stat: %w", err)
		}
		t.Total += v
		switch i {
		case 3, 4:
			t.Idle += v
		case 7:
			t.Steal += v
		}
	}
	return t, nil
}

// Share is how the CPU time between two readings was spent, in percent of
// all of it.
type Share struct {
	IdlePct  float64
	StealPct float64
}

// Since is the share of the time between before and t; ok is false when
// no time passed between them (the counters tick at the kernel's USER_HZ).
func (t Times) Since(before Times) (s Share, ok bool) {
	d := float64(t.Total - before.Total)
	if t.Total <= before.Total {
		return Share{}, false
	}
	return Share{IdlePct: 100 * float64(t.Idle-before.Idle) / d, StealPct: 100 * float64(t.Steal-before.Steal) / d}, true
}
