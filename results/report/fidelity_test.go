package report

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The files carry the verdict, derived from the record as it is written
// (so it follows anything added to it), and read back to the same record;
// fidelity.json's old name for the lowest idle share is still read.
func TestFidelityWritesItsVerdict(t *testing.T) {
	for _, c := range []struct {
		f    Fidelity
		want string
	}{
		{Fidelity{MinCPUIdlePct: 40}, `"unfaithful":false`},
		{Fidelity{DelayLines: &DelayFidelity{Late: true, LatenessP99US: 230, LimitUS: 200}}, `"unfaithful":true`},
		{Fidelity{DelayLines: &DelayFidelity{Unasked: 3}}, `"unfaithful":true`},
		{Fidelity{DelayLinesUnfaithful: true}, `"unfaithful":true`},
	} {
		b, err := json.Marshal(&c.f)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), c.want) {
			t.Errorf("%s lacks %s", b, c.want)
		}
		var back Fidelity
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if back.Faithful() != c.f.Faithful() || back.MinCPUIdlePct != c.f.MinCPUIdlePct || back.Flags() != c.f.Flags() {
			t.Errorf("read back %+v from %s, want %+v", back, b, c.f)
		}
	}
	var old Fidelity
	if err := json.Unmarshal([]byte(`{"cpu_min_idle_pct": 36.4, "unfaithful": true}`), &old); err != nil || old.MinCPUIdlePct != 36.4 {
		t.Errorf("old fidelity.json read as %+v (%v)", old, err)
	}
}

// The runner writes the captures' drops into meta.json's record, and the
// captures' statistics files hold the same drops: the loader counts them
// once, from the files, and the verdict it loads follows them.
func TestCaptureDropsCountedOnce(t *testing.T) {
	dir, _ := trialDir(t, t.TempDir(), "tcp-droptail", 0.4, 1, 1, 17)
	b, err := os.ReadFile(filepath.Join(dir, MetaFile))
	if err != nil {
		t.Fatal(err)
	}
	var meta map[string]any
	if err := json.Unmarshal(b, &meta); err != nil {
		t.Fatal(err)
	}
	meta["fidelity"] = Fidelity{CaptureDrops: 17}
	if b, err = json.Marshal(meta); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, MetaFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
	sum, err := LoadTrial(dir)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Fidelity.CaptureDrops != 17 || sum.Fidelity.Faithful() {
		t.Errorf("capture drops %d (faithful %v), want 17 counted once and a flagged trial", sum.Fidelity.CaptureDrops, sum.Fidelity.Faithful())
	}
}
