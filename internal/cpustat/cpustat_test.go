package cpustat

import "testing"

func TestParseCountsIdleStealAndLeavesGuestOut(t *testing.T) {
	// A line as this machine's kernel writes it, with guest time that the
	// kernel has already counted in user.
	got, err := parse("cpu  2406 0 1787 10767 312 0 86 40 500 7\ncpu0 1 2 3 4 5 6 7 8 9 10\n")
	if err != nil {
		t.Fatal(err)
	}
	want := Times{Idle: 10767 + 312, Steal: 40, Total: 2406 + 1787 + 10767 + 312 + 86 + 40}
	if got != want {
		t.Fatalf("parse = %+v, want %+v", got, want)
	}
	later := Times{Idle: want.Idle + 50, Steal: want.Steal + 25, Total: want.Total + 100}
	s, ok := later.Since(got)
	if !ok || s.IdlePct != 50 || s.StealPct != 25 {
		t.Fatalf("Since = %+v %v, want 50 %% idle, 25 %% steal", s, ok)
	}
	if _, ok := got.Since(got); ok {
		t.Fatal("Since of the same reading is ok; want no share when no time passed")
	}
}

func TestParseRejectsOtherLines(t *testing.T) {
	for _, s := range []string{"", "intr 1 2 3 4 5", "cpu 1 2 x 4 5"} {
		if _, err := parse(s); err == nil {
			t.Errorf("parse(%q) succeeded", s)
		}
	}
}

func TestReadOnThisMachine(t *testing.T) {
	a, err := Read()
	if err != nil {
		t.Fatal(err)
	}
	if a.Total == 0 || a.Idle > a.Total || a.Steal > a.Total {
		t.Fatalf("Read = %+v: inconsistent", a)
	}
}
