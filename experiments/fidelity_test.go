package experiments

import (
	"strings"
	"testing"
	"time"

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
