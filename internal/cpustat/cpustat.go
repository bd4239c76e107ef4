// Package cpustat reads the machine's cumulative CPU times from /proc/stat,
// and processes' and threads' from their stat files, for the fidelity
// monitor and for tests that judge a run by the CPU it had. One parser, so
// that every judge counts idle, steal and a process's time alike.
package cpustat

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// TicksPerSecond is the unit of every time this package reads: USER_HZ,
// which Linux fixes at 100 for /proc on every architecture fabric runs on
// (include/asm-generic/param.h; `getconf CLK_TCK`).
const TicksPerSecond = 100

// Times are cumulative CPU times, in ticks, from one cpu line of
// /proc/stat: the aggregate "cpu" line or one CPU's "cpuN".
type Times struct {
	// Idle is idle plus iowait: time no task wanted the CPU.
	Idle uint64
	// Steal is time the hypervisor ran something else while this machine
	// had work: a virtual machine's CPU that no setting of a lab gives
	// back, and the cause of stalls that look like lateness.
	Steal uint64
	// Softirq is the kernel's interrupt work, soft and hard (hard irq is
	// a few ticks a day on these virtual machines): where a lab's packets
	// are forwarded, since every veth hands its packets to the receiving
	// end's softirq.
	Softirq uint64
	// Total is the sum of user, nice, system, idle, iowait, irq, softirq
	// and steal. Guest time is left out: the kernel already counts it in
	// user.
	Total uint64
}

// Stat is one reading of /proc/stat: the machine's times and each CPU's,
// in the kernel's order.
type Stat struct {
	Times
	CPUs []Times
}

// Read returns the machine's current times.
func Read() (Times, error) {
	s, err := ReadStat()
	return s.Times, err
}

// ReadStat reads /proc/stat once, the machine's line and every CPU's.
func ReadStat() (Stat, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return Stat{}, err
	}
	return ParseStat(string(b))
}

// ParseStat reads the cpu lines of a /proc/stat text: the first must be
// the machine's; the cpuN lines after it are each CPU's.
func ParseStat(s string) (Stat, error) {
	var st Stat
	first := true
	for line := range strings.Lines(s) {
		name, rest, _ := strings.Cut(strings.TrimSpace(line), " ")
		if first {
			if name != "cpu" {
				return Stat{}, fmt.Errorf("/proc/stat: unexpected first line %q", strings.TrimSpace(line))
			}
			first = false
			var err error
			if st.Times, err = parseTimes(rest); err != nil {
				return Stat{}, err
			}
			continue
		}
		if !strings.HasPrefix(name, "cpu") {
			break // the cpu lines come first, together
		}
		t, err := parseTimes(rest)
		if err != nil {
			return Stat{}, err
		}
		st.CPUs = append(st.CPUs, t)
	}
	if first {
		return Stat{}, fmt.Errorf("/proc/stat: empty")
	}
	return st, nil
}

// parseTimes reads the fields of one cpu line after its name:
// user nice system idle iowait irq softirq steal guest guest_nice.
func parseTimes(fields string) (Times, error) {
	f := strings.Fields(fields)
	if len(f) < 4 {
		return Times{}, fmt.Errorf("/proc/stat: cpu line with %d fields", len(f))
	}
	var t Times
	for i, s := range f[:min(len(f), 8)] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return Times{}, fmt.Errorf("/proc/stat: %w", err)
		}
		t.Total += v
		switch i {
		case 3, 4:
			t.Idle += v
		case 5, 6:
			t.Softirq += v
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

// The fidelity judge's rule for a saturated CPU: an interval with less
// than SaturatedIdlePct idle is saturated, and a run is unfaithful when
// more than SaturatedShare of its intervals are (docs/design.md,
// fidelity). One rule, so that trials and tests judge the CPU alike.
const (
	SaturatedIdlePct = 20.0
	SaturatedShare   = 0.10
)

// NotableStealPct is the hypervisor's share of the CPU from which fabric
// names it: below it, timing and rate checks on fabric's own virtual
// machine kept their margins, and a calibration's costs are the
// machine's; above it, a report names it beside a trial and a
// calibration is measured again.
const NotableStealPct = 2.0

// Saturated says whether an interval's share of the CPU was saturated.
func Saturated(s Share) bool { return s.IdlePct < SaturatedIdlePct }
