package layers

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoUpwardImports lists every package of the module with its imports
// (go list) and fails on any import of a higher layer, or on a package
// that has no layer.
func TestNoUpwardImports(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, Module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg, imports := fields[0], fields[1:]
		from, ok := Of(pkg)
		if !ok {
			t.Errorf("%s has no layer: add it to layers.order", pkg)
			continue
		}
		n++
		for _, imp := range imports {
			if to, ok := Of(imp); ok && to > from {
				t.Errorf("%s (layer %d) imports %s (layer %d)", pkg, from, imp, to)
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
