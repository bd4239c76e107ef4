package cpustat

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Task is what a /proc/PID/stat or /proc/PID/task/TID/stat file says of
// a process's or a thread's CPU time, in ticks.
type Task struct {
	Name string // the command name (field 2)
	// Own is user plus system time (utime + stime). For a process it is
	// every thread's, those that ended included. On a kernel without
	// CONFIG_IRQ_TIME_ACCOUNTING it includes the softirq work that ran on
	// the task's time, as in its system calls.
	Own uint64
	// Children is the time of its children that it has waited for
	// (cutime + cstime).
	Children uint64
}

// ParseTask reads a stat file's text. The command name (field 2) may hold
// spaces and parentheses, so the fields are counted after its last ')'.
func ParseTask(s string) (Task, error) {
	i := strings.LastIndexByte(s, ')')
	j := strings.IndexByte(s, '(')
	if i < 0 || j < 0 || j > i {
		return Task{}, fmt.Errorf("stat: no command name in %q", s)
	}
	// After the name: state (field 3) … utime (14), stime (15), cutime
	// (16), cstime (17); proc_pid_stat(5).
	f := strings.Fields(s[i+1:])
	if len(f) < 15 {
		return Task{}, fmt.Errorf("stat: %d fields after the command name, want at least 15", len(f))
	}
	var v [4]uint64
	for k := range v {
		n, err := strconv.ParseInt(f[11+k], 10, 64) // cutime and cstime are signed in the kernel's format
		if err != nil || n < 0 {
			return Task{}, fmt.Errorf("stat: field %d: %q is not a tick count", 14+k, f[11+k])
		}
		v[k] = uint64(n)
	}
	return Task{Name: s[j+1 : i], Own: v[0] + v[1], Children: v[2] + v[3]}, nil
}

// ReadProcess reads /proc/PID/stat.
func ReadProcess(pid int) (Task, error) {
	return readTask(fmt.Sprintf("/proc/%d/stat", pid))
}

// ReadThread reads the stat file of thread tid of this process.
func ReadThread(tid int) (Task, error) {
	return readTask(fmt.Sprintf("/proc/self/task/%d/stat", tid))
}

func readTask(path string) (Task, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Task{}, err
	}
	t, err := ParseTask(string(b))
	if err != nil {
		return Task{}, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// ReadOthers sums the time of every process on the machine but those skip
// names, and of the children each has waited for: read at two moments, the
// difference is what the other processes used between them, those that
// ended included (their time moved to the parent that waited for them).
// The kernel's softirq threads (ksoftirqd/N) are left out: their time is
// in /proc/stat's softirq.
func ReadOthers(skip func(pid int) bool) (uint64, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	var sum uint64
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || skip(pid) {
			continue
		}
		t, err := ReadProcess(pid)
		if err != nil || strings.HasPrefix(t.Name, "ksoftirqd/") {
			continue // ended since the listing
		}
		sum += t.Own + t.Children
	}
	return sum, nil
}

// ThreadTime is the CPU time thread tid of this process has used, to the
// nanosecond: its CPU clock (clock_gettime on MAKE_THREAD_CPUCLOCK(tid,
// CPUCLOCK_SCHED), include/linux/posix-timers.h), where its stat file
// counts whole ticks of 10 ms.
func ThreadTime(tid int) (time.Duration, error) {
	var ts unix.Timespec
	clock := int32(^uint32(tid)<<3) | 6 // CPUCLOCK_SCHED | CPUCLOCK_PERTHREAD_MASK
	if err := unix.ClockGettime(clock, &ts); err != nil {
		return 0, fmt.Errorf("thread %d: cpu clock: %w", tid, err)
	}
	return time.Duration(ts.Nano()), nil
}

// ProcessTime is the CPU time process pid has used, every thread's, to
// the nanosecond: its CPU clock (MAKE_PROCESS_CPUCLOCK(pid,
// CPUCLOCK_SCHED), include/linux/posix-timers.h), which Linux lets any
// process read.
func ProcessTime(pid int) (time.Duration, error) {
	var ts unix.Timespec
	clock := int32(^uint32(pid)<<3) | 2 // CPUCLOCK_SCHED
	if err := unix.ClockGettime(clock, &ts); err != nil {
		return 0, fmt.Errorf("process %d: cpu clock: %w", pid, err)
	}
	return time.Duration(ts.Nano()), nil
}
