package report

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A run all of whose trials failed still gets a report: its Failed
// section gives each failure's reason, and trials that share one (those
// left unrun) share a line. A set-aside run is not a failure.
func TestFailedSection(t *testing.T) {
	root := t.TempDir()
	incomplete := func(rel, reason string) {
		dir := filepath.Join(root, rel)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, IncompleteFile), []byte(reason+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	incomplete("mine_load10/trial-1", "scheme mine (transport myt.py), host h2: exited with status 1\nafter its ready line, before the start")
	incomplete("mine_load20/trial-1", "scheme mine (transport myt.py), host h1: no \"ready\" line")
	incomplete("mine_load30/trial-1", "not run: scheme mine failed on mine_load10 and mine_load20 in a row")
	incomplete("mine_load30/trial-2", "not run: scheme mine failed on mine_load10 and mine_load20 in a row")
	incomplete(SetAsideDir+"/mine_load10/trial-1.1", "set aside")
	trials, failed, err := LoadRun(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(trials) != 0 || len(failed) != 4 {
		t.Fatalf("%d trials, %d failures; want 0 and 4: %v", len(trials), len(failed), failed)
	}
	rep, err := WriteRun(root, failed, trials...)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"## Failed",
		"- mine_load10 trial 1: scheme mine (transport myt.py), host h2: exited with status 1 after its ready line, before the start\n",
		"- mine_load20 trial 1: scheme mine",
		"- mine_load30 trial 1, mine_load30 trial 2: not run: scheme mine failed on mine_load10 and mine_load20 in a row\n",
	} {
		if !strings.Contains(rep.Markdown, want) {
			t.Errorf("report lacks %q:\n%s", want, rep.Markdown)
		}
	}
	if strings.Contains(rep.Markdown, "set aside") {
		t.Errorf("a set-aside run is listed as failed:\n%s", rep.Markdown)
	}
	if _, _, err := LoadRun(t.TempDir()); err == nil {
		t.Error("an empty directory loaded as a run")
	}
}
