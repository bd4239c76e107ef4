package layers

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoUpwardImports lists every package of the module with its imports
// and its tests' imports, in-package and external (go list), and fails on
// any import of a higher layer, or on a package that has no layer: a test
// belongs to the layer of the highest package it needs.
func TestNoUpwardImports(t *testing.T) {
	out, err := exec.Command("go", "list", "-f",
		`{{.ImportPath}}|{{join .Imports " "}}|{{join .TestImports " "}} {{join .XTestImports " "}}`, Module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Split(line, "|")
		pkg := fields[0]
		from, ok := Of(pkg)
		if !ok {
			t.Errorf("%s has no layer: add it to layers.order", pkg)
			continue
		}
		n++
		for i, where := range []string{"", " in its tests"} {
			for _, imp := range strings.Fields(fields[i+1]) {
				if to, ok := Of(imp); ok && to > from {
					t.Errorf("%s (layer %d) imports %s (layer %d)%s", pkg, from, imp, to, where)
				}
			}
		}
	}
	if n < 20 {
		t.Fatalf("only %d packages listed", n)
	}
}

func TestOf(t *testing.T) {
	for pkg, want := range map[string]int{
		Module + "/hosts/transport":        0,
		Module + "/hosts/transport/homa":   2,
		Module + "/hosts":                  2,
		Module + "/hosts/cc/cctest":        1,
		Module + "/tc/pacer":               1,
		Module + "/results/report":         4,
		Module + "/experiments/paper":      5,
		Module + "/internal/netnsutil":     0,
		Module + "/cmd/fabric":             6,
		Module + "/emu":                    3,
		Module + "/experiments":            5,
		Module + "/examples/custom":        6,
		Module + "/internal/layers":        0,
		Module + "/results/internal/synth": 4,
	} {
		if got, ok := Of(pkg); !ok || got != want {
			t.Errorf("Of(%s) = %d, %v; want %d", pkg, got, ok, want)
		}
	}
	if _, ok := Of("github.com/other/module"); ok {
		t.Error("a package outside the module has a layer")
	}
}
