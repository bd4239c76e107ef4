package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSlug(t *testing.T) {
	for text, want := range map[string]string{
		" Links: delay, loss and serialisation": "links-delay-loss-and-serialisation",
		" A lab's life":                         "a-labs-life",
		" The `fabric graph` picture":           "the-fabric-graph-picture",
		" [docs](x.md) and more":                "docs-and-more",
		" Fidelity":                             "fidelity",
	} {
		if got := slug(text); got != want {
			t.Errorf("slug(%q) = %q, want %q", text, got, want)
		}
	}
}

// TestCheckFile finds exactly the broken links of a small tree.
func TestCheckFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("docs/b.md", "# B\n\n## Two words\n\n## Two words\n")
	write("docs/img/x.png", "png")
	write("a.md", strings.Join([]string{
		"[ok](docs/b.md) [dir](docs/img/) ![img](docs/img/x.png \"title\")",
		"[anchor](docs/b.md#two-words) [again](docs/b.md#two-words-1) [self](#a)",
		"[web](https://example.com/missing) `[code](missing.md)`",
		"```", "[fenced](missing.md)", "```",
		"# A",
		"[gone](missing.md) [bad anchor](docs/b.md#three) [bad self](#nope)",
		"[ref]: docs/nothing.md",
	}, "\n"))
	got, err := checkFile(filepath.Join(dir, "a.md"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"missing.md", "docs/b.md#three", "#nope", "docs/nothing.md"}
	if len(got) != len(want) {
		t.Fatalf("problems:\n%s\nwant %d: %v", strings.Join(got, "\n"), len(want), want)
	}
	for i, w := range want {
		if !strings.Contains(got[i], ": "+w+": ") {
			t.Errorf("problem %d = %q, want one about %s", i, got[i], w)
		}
	}
}
