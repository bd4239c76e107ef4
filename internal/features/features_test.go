package features

import (
	"context"
	"testing"

	"github.com/fabric-emu/fabric/internal/testenv"
)

// The project kernel is documented in docs/design.md: htb/bfifo/clsact present,
// prio absent. The check must tell them apart (it would report everything
// present if it confused "bad options" with "unknown kind", or nothing if
// it could not create qdiscs at all).
func TestDetectTellsPresentFromAbsent(t *testing.T) {
	testenv.RequireRoot(t)
	r := Detect(context.Background())
	if r.QdiscErr != "" {
		t.Fatal(r.QdiscErr)
	}
	for _, k := range []string{"htb", "bfifo", "pfifo", "clsact"} {
		if !r.Qdiscs[k] {
			t.Errorf("qdisc %s reported missing; fabric cannot work without it", k)
		}
	}
	present, absent := 0, 0
	for _, ok := range r.Qdiscs {
		if ok {
			present++
		} else {
			absent++
		}
	}
	t.Logf("%+v", r)
	if absent == 0 {
		t.Errorf("every qdisc reported present; the check cannot distinguish")
	}
	if !r.ClsBPF {
		t.Errorf("cls_bpf: %s", r.ClsBPFErr)
	}
	if len(r.CongestionControls) == 0 {
		t.Error("no congestion controls read")
	}
}
