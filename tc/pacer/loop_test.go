package pacer

import (
	"math"
	"slices"
	"testing"
	"time"
)

// testPacer is a pacer as the loop sees it, with no kernel behind it: its
// rate changes are recorded, and its class's counters are b's (the
// tracepoints missed nothing) plus missed.
func testPacer(t *testing.T, tr time.Duration, b *loopBucket, missed *classCounts) (*Pacer, *[]float64) {
	t.Helper()
	cfg, err := Config{RateInterval: tr, LineRate: lineRate}.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	line := cfg.LineRate.BytesPerSecond()
	p := &Pacer{cfg: cfg, ctl: controller{eta: cfg.Eta, beta: cfg.Beta, min: line / 1000, max: line, rate: line}}
	var set []float64
	p.setRate = func(r float64) error { set = append(set, r); return nil }
	p.readClass = func() (uint64, uint32, error) {
		return b.Out + missed.sent, uint32(b.In + missed.in - b.Out - missed.sent), nil
	}
	p.lastSet, p.due = p.ctl.rate, nextTick(0, tr)
	return p, &set
}

// classCounts are bytes the class counted and the tracepoints did not.
type classCounts struct{ in, sent uint64 }

// An idle bucket's rate decays by (1-η) per update from the line rate to
// the floor, line/1000, and the pacer rests at the first update that
// leaves it there: ceil(ln(1000)/ln(1/(1-η))) updates, 52 at η = 1/8.
func TestIdlePacerRestsAtTheFloor(t *testing.T) {
	tr := 640 * time.Microsecond
	var b loopBucket
	p, set := testPacer(t, tr, &b, &classCounts{})
	want := int(math.Ceil(math.Log(1000) / math.Log(1/(1-p.cfg.Eta))))
	n := 0
	for now := int64(tr); !p.resting; now += int64(tr) {
		if n++; n > 10*want {
			t.Fatalf("no rest after %d updates of an idle bucket (rate %.0f B/s, floor %.0f)", n, p.ctl.rate, p.ctl.min)
		}
		if err := p.update(&b, now); err != nil {
			t.Fatal(err)
		}
	}
	if n != want || p.ctl.rate != p.ctl.min {
		t.Errorf("rested after %d updates at %.1f B/s, want %d updates at the floor %.1f", n, p.ctl.rate, want, p.ctl.min)
	}
	if b.Resting != 1 {
		t.Error("the bucket's resting flag is not set for the eBPF program")
	}
	if len(*set) == 0 || (*set)[len(*set)-1] > p.ctl.min+0.5e6/8 {
		t.Errorf("rates set on the way down: %v; the last must be within 0.5 Mbit/s of the floor", *set)
	}
	// Nothing entered the bucket: still at rest.
	if p.wake(&b, int64(n+5)*int64(tr)) {
		t.Error("woke with no packet")
	}
	b.In += 1500
	if !p.wake(&b, int64(n+5)*int64(tr)+int64(tr)/3) || p.resting || b.Resting != 0 {
		t.Error("did not wake when a packet entered the bucket")
	}
}

// A pacer that rests through idle periods sets exactly the rates one that
// updates every T_r sets: over a trace of bursts and silences, every
// update it makes computes the rate the always-updating controller has at
// that tick, and wherever it rests that controller sits at the floor.
func TestRestingMatchesUpdatingEveryInterval(t *testing.T) {
	tr := 640 * time.Microsecond
	var b loopBucket
	p, set := testPacer(t, tr, &b, &classCounts{})
	ref := p.ctl
	refLast := ref.rate
	var refSet []float64
	// Interval k's arrivals and the backlog at its end: bursts of a few
	// intervals, some leaving a queue, between silences long enough to
	// rest in and some too short.
	type interval struct{ arrived, backlog float64 }
	var trace []interval
	for burst, gap := range []int{3, 200, 7, 20, 1, 90, 12, 400} {
		for i := range 2 + burst%3 {
			trace = append(trace, interval{arrived: float64(1500 * (3 + i + burst)), backlog: float64(1500 * (i % 2))})
		}
		trace = append(trace, interval{}) // the queue drained
		for range gap {
			trace = append(trace, interval{})
		}
	}
	var in, updates uint64
	for k, iv := range trace {
		start, end := int64(k)*int64(tr), int64(k+1)*int64(tr)
		if iv.arrived > 0 {
			in += uint64(iv.arrived)
			b.In = in // mid-interval: the eBPF program wakes a resting loop
			if p.resting && !p.wake(&b, start+int64(tr)/2) {
				t.Fatalf("interval %d: a resting pacer did not wake for a packet", k)
			}
		}
		b.Out = in - uint64(iv.backlog)
		want := ref.step(iv.arrived, tr, iv.backlog)
		if math.Abs(want-refLast)*8 >= 0.5e6 {
			refSet, refLast = append(refSet, want), want
		}
		if p.resting {
			if want != p.ctl.min {
				t.Fatalf("interval %d: resting while the controller moved to %.1f B/s", k, want)
			}
			continue
		}
		if p.due != end {
			t.Fatalf("interval %d: next update due at %d ns, want the interval's end %d", k, p.due, end)
		}
		if err := p.update(&b, end); err != nil {
			t.Fatal(err)
		}
		updates++
		if p.ctl.rate != want {
			t.Fatalf("interval %d: rate %.3f B/s, updating every interval gives %.3f", k, p.ctl.rate, want)
		}
	}
	if !slices.Equal(*set, refSet) {
		t.Errorf("rates set: %v\nupdating every interval: %v", *set, refSet)
	}
	if updates >= uint64(len(trace))/2 {
		t.Errorf("%d updates over %d intervals: the pacer hardly rested", updates, len(trace))
	}
	t.Logf("%d updates over %d intervals, %d rate changes", updates, len(trace), len(refSet))
}

// Pacers with one T_r fall due at the same instants wherever they
// started, so that one wake-up serves them all.
func TestTicksShareTheGrid(t *testing.T) {
	tr := 640 * time.Microsecond
	for _, now := range []int64{0, 1, int64(tr) - 1, int64(tr), 12345678} {
		next := nextTick(now, tr)
		if next <= now || next-now > int64(tr) || next%int64(tr) != 0 {
			t.Errorf("nextTick(%d) = %d", now, next)
		}
	}
}

// When the tracepoints miss a packet, the class's counters put it right
// within resyncEvery updates, and a pacer does not rest on a backlog only
// the class knows of.
func TestResyncCorrectsMissedPackets(t *testing.T) {
	tr := 640 * time.Microsecond
	var b loopBucket
	missed := &classCounts{}
	p, _ := testPacer(t, tr, &b, missed)
	now := int64(0)
	step := func() {
		t.Helper()
		now += int64(tr)
		if err := p.update(&b, now); err != nil {
			t.Fatal(err)
		}
	}
	// 3000 bytes in and out; one more packet of 1500 went through the
	// bucket unseen, and another sits in it unseen.
	b.In, b.Out = 3000, 3000
	missed.in, missed.sent = 3000, 1500
	for range resyncEvery {
		step()
	}
	in, out := p.counters(&b)
	if in != 6000 || out != 4500 {
		t.Fatalf("after %d updates the loop counts %d in, %d out; the class %d, %d", resyncEvery, in, out, 6000, 4500)
	}
	// Until the unseen packet leaves, the pacer never rests.
	for range 200 {
		step()
	}
	if p.resting {
		t.Fatal("rested with a packet in the bucket")
	}
	missed.sent = 3000 // it left
	for range 200 {
		step()
	}
	if !p.resting {
		t.Errorf("did not rest once the bucket drained (rate %.0f, floor %.0f)", p.ctl.rate, p.ctl.min)
	}
}
