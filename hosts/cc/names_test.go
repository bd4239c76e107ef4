package cc

import (
	"path/filepath"
	"testing"
)

func TestLabDirEscapesDots(t *testing.T) {
	// bpffs refuses '.', and distinct labs must not share a directory.
	seen := map[string]string{}
	for _, lab := range []string{"hull", "a.b", "a_b", "a_db", "fab.t1.x"} {
		dir, err := labDir(lab)
		if err != nil {
			t.Fatalf("%s: %v", lab, err)
		}
		base := filepath.Base(dir)
		for _, c := range base {
			if c == '.' || c == '/' {
				t.Errorf("lab %q maps to %q", lab, base)
			}
		}
		if other, dup := seen[base]; dup {
			t.Errorf("labs %q and %q share %q", lab, other, base)
		}
		seen[base] = lab
	}
}

func TestMapNameFitsKernel(t *testing.T) {
	for _, n := range []string{DCTCP, FabricDCTCP, "fabt1234567"} {
		if m := mapNameFor(n); len(m) > 15 {
			t.Errorf("map name for %q is %q (%d > 15 bytes)", n, m, len(m))
		}
	}
	if mapNameFor(DCTCP) == mapNameFor(FabricDCTCP) {
		t.Error("dctcp and fabric_dctcp registrations would be indistinguishable")
	}
}

func TestInfoLines(t *testing.T) {
	for info, want := range map[Info]string{
		{Name: DCTCP, Provider: Kernel}:          "dctcp: kernel module",
		{Name: DCTCP, Provider: FabricBPF}:       "dctcp: BPF struct_ops (kernel has none)",
		{Name: FabricDCTCP, Provider: FabricBPF}: "fabric_dctcp: BPF struct_ops",
	} {
		if got := info.String(); got != want {
			t.Errorf("%+v: %q, want %q", info, got, want)
		}
	}
}
