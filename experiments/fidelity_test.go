package experiments

import (
	"strings"
	"testing"
	"time"

	"github.com/fabric-emu/fabric/results/report"
	"github.com/fabric-emu/fabric/tc/delay"
)

// A trial flagged for late delay lines says when an idle delay line on the
// machine was already later than the limit, and only then.
func TestAdviceNamesTheMachineFloor(t *testing.T) {
	late := func(floor time.Duration) *FidelityRecord {
		return &FidelityRecord{Unfaithful: true, DelayLines: &DelayFidelity{LatenessP99US: 180, LimitUS: 50, Late: true,
			Machine: &delay.MachineTiming{FloorP99: floor}}}
	}
	spec := &Spec{}
	if a := late(120 * time.Microsecond).advice(spec); !strings.Contains(a, "timed before the traffic") || !strings.Contains(a, "120 µs") {
		t.Errorf("floor above the limit, advice: %s", a)
	}
	if a := late(30 * time.Microsecond).advice(spec); strings.Contains(a, "timed before the traffic") {
		t.Errorf("floor below the limit, advice: %s", a)
	}
}

// A loop that takes longer per packet than a full-size packet's time on
// the link falls behind within bursts; the advice says so, with the rate
// below which it would not, and only then.
func TestAdviceNamesALoopSlowerThanTheLink(t *testing.T) {
	late := func(loopUS float64) *FidelityRecord {
		return &FidelityRecord{Unfaithful: true, DelayLines: &DelayFidelity{LatenessP99US: 1000, LimitUS: 500, Late: true,
			LoopCPUPerPacketUS: loopUS, FullFrameUS: 65}}
	}
	spec := &Spec{}
	// 1514 bytes in 85 µs: 142 Mbit/s.
	if a := late(85).advice(spec); !strings.Contains(a, "falls behind within a burst") || !strings.Contains(a, "142 Mbit/s") {
		t.Errorf("loop slower than a frame, advice: %s", a)
	}
	if a := late(50).advice(spec); strings.Contains(a, "falls behind") {
		t.Errorf("loop faster than a frame, advice: %s", a)
	}
}

// The machine's input backlogs' drops are read from softnet_stat (this
// machine has one line per CPU), and any during a trial flags it.
func TestBacklogDrops(t *testing.T) {
	if _, err := readBacklogDrops(); err != nil {
		t.Fatal(err)
	}
	f := &FidelityRecord{BacklogDrops: 615}
	if a := f.advice(&Spec{}); !strings.Contains(a, "615 packets no port or line counted") {
		t.Errorf("advice: %s", a)
	}
	if (report.Fidelity{BacklogDrops: 1}).Faithful() {
		t.Error("a trial whose backlogs dropped packets counts as faithful")
	}
}
