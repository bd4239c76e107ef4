package report

import (
	"strings"
	"testing"

	"github.com/fabric-emu/fabric/internal/machine"
)

// Schemes of one set of sweep values on machines of different kinds are
// flagged; those on machines of one kind are not.
func TestMixedPoints(t *testing.T) {
	a := &Machine{Name: "n1", Machine: machine.Machine{CPUs: 2, Model: "EPYC"}, Kernel: "6.1"}
	b := &Machine{Name: "n2", Machine: machine.Machine{CPUs: 2, Model: "EPYC"}, Kernel: "6.1"}
	c := &Machine{Name: "n3", Machine: machine.Machine{CPUs: 8, Model: "Xeon"}, Kernel: "6.1"}
	at := func(load, scheme string, n *Machine) *TrialSummary {
		return &TrialSummary{Scheme: scheme, SchemeName: scheme, Sweep: []SweepValue{{Key: "load", Value: load}}, Machine: n}
	}
	trials := []*TrialSummary{at("20%", "tcp", a), at("20%", "dctcp", b), at("40%", "tcp", a), at("40%", "dctcp", c)}
	mixed := MixedPoints(trials)
	if len(mixed) != 1 || !strings.Contains(mixed[0], "load=40%") || !strings.Contains(mixed[0], "dctcp on 8 × Xeon") {
		t.Errorf("MixedPoints = %q, want load=40%% alone, naming where dctcp ran", mixed)
	}
	var b2 strings.Builder
	machinesSection(&b2, trials)
	for _, want := range []string{"| n1 |", "| n3 |", "**Flagged:**"} {
		if !strings.Contains(b2.String(), want) {
			t.Errorf("machines section has no %q:\n%s", want, b2.String())
		}
	}
}
