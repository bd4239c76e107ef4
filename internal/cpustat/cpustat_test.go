package cpustat

import (
	"os"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestParseCountsIdleStealSoftirqAndLeavesGuestOut(t *testing.T) {
	// Lines as this machine's kernel writes them, with guest time that the
	// kernel has already counted in user.
	got, err := ParseStat("cpu  2406 0 1787 10767 312 3 86 40 500 7\n" +
		"cpu0 1200 0 900 5400 12 1 50 20 250 3\n" +
		"cpu1 1206 0 887 5367 300 2 36 20 250 4\n" +
		"intr 6544577 0 0\nctxt 1\n")
	if err != nil {
		t.Fatal(err)
	}
	want := Times{Idle: 10767 + 312, Steal: 40, Softirq: 3 + 86, Total: 2406 + 1787 + 10767 + 312 + 3 + 86 + 40}
	if got.Times != want {
		t.Fatalf("machine = %+v, want %+v", got.Times, want)
	}
	cpus := []Times{
		{Idle: 5412, Steal: 20, Softirq: 51, Total: 1200 + 900 + 5400 + 12 + 1 + 50 + 20},
		{Idle: 5667, Steal: 20, Softirq: 38, Total: 1206 + 887 + 5367 + 300 + 2 + 36 + 20},
	}
	if len(got.CPUs) != 2 || got.CPUs[0] != cpus[0] || got.CPUs[1] != cpus[1] {
		t.Fatalf("CPUs = %+v, want %+v", got.CPUs, cpus)
	}
	later := Times{Idle: want.Idle + 50, Steal: want.Steal + 25, Total: want.Total + 100}
	s, ok := later.Since(want)
	if !ok || s.IdlePct != 50 || s.StealPct != 25 {
		t.Fatalf("Since = %+v %v, want 50 %% idle, 25 %% steal", s, ok)
	}
	if _, ok := want.Since(want); ok {
		t.Fatal("Since of the same reading is ok; want no share when no time passed")
	}
}

func TestParseRejectsOtherLines(t *testing.T) {
	for _, s := range []string{"", "intr 1 2 3 4 5", "cpu 1 2 x 4 5", "cpu 1 2\n", "cpu 1 2 3 4\ncpu0 1 y 3 4\n"} {
		if _, err := ParseStat(s); err == nil {
			t.Errorf("ParseStat(%q) succeeded", s)
		}
	}
}

func TestParseTask(t *testing.T) {
	// A transport's /proc/PID/stat whose command name holds a space and a
	// parenthesis: utime 1234, stime 567, cutime 8, cstime 9 (fields 14–17).
	s := "4242 (fab ric)) S 1 4242 4242 0 -1 4194560 1093 0 0 0 1234 567 8 9 20 0 7 0 123456 1234567 890 " +
		"18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n"
	got, err := ParseTask(s)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Task{Name: "fab ric)", Own: 1234 + 567, Children: 8 + 9}); got != want {
		t.Fatalf("ParseTask = %+v, want %+v", got, want)
	}
	for _, bad := range []string{"", "4242 fabric S 1", "4242 (fabric) S 1 2 3", "4242 (x) S 1 1 1 0 -1 0 0 0 0 0 -5 6 7 8 20"} {
		if _, err := ParseTask(bad); err == nil {
			t.Errorf("ParseTask(%q) succeeded", bad)
		}
	}
}

func TestReadOnThisMachine(t *testing.T) {
	a, err := ReadStat()
	if err != nil {
		t.Fatal(err)
	}
	if a.Total == 0 || a.Idle > a.Total || a.Steal > a.Total || a.Softirq > a.Total || len(a.CPUs) == 0 {
		t.Fatalf("ReadStat = %+v: inconsistent", a)
	}
	var sum uint64
	for _, c := range a.CPUs {
		sum += c.Total
	}
	// The machine's line is the CPUs' lines summed, except that the kernel
	// rounds each of the 8 fields down to a tick once there and once per
	// CPU here (fs/proc/stat.c sums nanoseconds, then converts), and reads
	// each CPU's idle time again for its own line, microseconds later.
	if diff, bound := int64(a.Total)-int64(sum), int64(9*len(a.CPUs)); diff < -bound || diff > bound {
		t.Errorf("CPUs sum to %d ticks, the machine's line says %d", sum, a.Total)
	}
	if p, err := ReadProcess(os.Getpid()); err != nil || p.Own > a.Total {
		t.Errorf("ReadProcess(self) = %+v, %v", p, err)
	}
}

// A tracked loop's time is its thread's from the moment it was tracked,
// and stays counted after it ends; another loop's is apart.
func TestTrackCountsALoopsThread(t *testing.T) {
	before := LoopTimes()
	spin := func(loop Loop, d time.Duration) {
		done := make(chan struct{})
		go func() {
			defer close(done)
			untrack := Track(loop)
			defer untrack()
			for end := time.Now().Add(d); time.Now().Before(end); {
			}
		}()
		<-done
	}
	spin(Pacers, 300*time.Millisecond)
	after := LoopTimes()
	// 300 ms of spinning is 30 ticks when the thread had a core to itself;
	// on a shared machine it may have had less, never more.
	if got := after[Pacers] - before[Pacers]; got == 0 || got > 31 {
		t.Errorf("a pacer loop that spun 300 ms counted %.1f ticks, want 1–31", got)
	}
	if after[Captures] != before[Captures] || after[DelayLines] != before[DelayLines] {
		t.Errorf("other loops' times moved: %v to %v", before, after)
	}
	if again := LoopTimes(); again[Pacers] != after[Pacers] {
		t.Errorf("an ended loop's time moved from %.1f to %.1f ticks", after[Pacers], again[Pacers])
	}
}

func TestThreadTimeCountsThisThread(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tid := unix.Gettid()
	before, err := ThreadTime(tid)
	if err != nil {
		t.Fatal(err)
	}
	for start := time.Now(); time.Since(start) < 30*time.Millisecond; {
	}
	after, err := ThreadTime(tid)
	if err != nil {
		t.Fatal(err)
	}
	// The spin ran on this thread for 30 ms of wall-clock time: its CPU
	// clock cannot have moved by more, and moved by some of it.
	if d := after - before; d <= 0 || d > 40*time.Millisecond {
		t.Errorf("a 30 ms spin moved the thread's CPU clock by %v", d)
	}
}

// A light loop's time counts to the nanosecond: 4 ms of CPU, less than a
// stat file's tick, on each of three threads is 12 ms in all, where whole
// ticks per thread would count 0 to 30 ms.
func TestTrackCountsLessThanATickPerThread(t *testing.T) {
	before := loopDurations()
	var spun time.Duration
	for range 3 {
		done := make(chan time.Duration)
		go func() {
			untrack := Track(Captures)
			tid := unix.Gettid()
			start, err := ThreadTime(tid)
			if err != nil {
				t.Error(err)
			}
			now := start
			for now-start < 4*time.Millisecond {
				now, _ = ThreadTime(tid)
			}
			untrack()
			done <- now - start
		}()
		spun += <-done
	}
	// Tracking's own clock reads fall just outside the measured spin.
	if got := loopDurations()[Captures] - before[Captures]; got < spun || got > spun+time.Millisecond {
		t.Errorf("three threads that used %v counted %v", spun, got)
	}
}
