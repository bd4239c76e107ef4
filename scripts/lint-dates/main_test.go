package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDatesIn finds the dates of comments, on their lines, and nothing in
// code, strings or citations.
func TestDatesIn(t *testing.T) {
	src := strings.Join([]string{
		"package x",
		"",
		"// Measured on 2026-11-27.", // 3
		"const stamp = \"20261123T093000Z\" // run 20261123T093000Z", // 4
		"/* a block",
		"   over lines, 27 Nov 2026 */", // 6
		"// HULL (Alizadeh et al., NSDI 2012) and May 2019:",            // 7: the citation is no date, May 2019 is
		"// Checked in November 2026, then Nov 28, 2026.",               // 8: two
		"var layout = \"2006-01-02\" // a Go time layout, 10 % of 2026", // 9: neither
	}, "\n")
	path := filepath.Join(t.TempDir(), "x.go")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := datesIn(path)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		":3: date in a comment: 2026-11-27",
		":4: date in a comment: 20261123T093000Z",
		":6: date in a comment: 27 Nov 2026",
		":7: date in a comment: May 2019",
		":8: date in a comment: November 2026",
		":8: date in a comment: Nov 28, 2026",
	}
	if len(got) != len(want) {
		t.Fatalf("found:\n%s\nwant %d", strings.Join(got, "\n"), len(want))
	}
	for i, w := range want {
		if !strings.HasSuffix(got[i], w) {
			t.Errorf("finding %d = %q, want …%q", i, got[i], w)
		}
	}
}
