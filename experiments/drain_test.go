package experiments

import (
	"os"
	"path/filepath"
	"testing"
)

// The drain's watch is done once every message has a whole flow record,
// read as lines complete: a partial line, a flow cut short by SIGTERM and
// another type of record leave it waiting. A stream runs to SIGTERM, so
// its schedule gets no watch.
func TestRecordWatchWaitsForEveryWholeFlow(t *testing.T) {
	dir := t.TempDir()
	s := &Schedule{Hosts: []ScheduleHost{{Name: "h0"}, {Name: "h1"}}, msgs: []schedMsg{{size: 1000, dst: 1}, {size: 50, dst: 1}}}
	w := newRecordWatch(dir, s)
	if w == nil || w.done() {
		t.Fatal("no watch, or done before any record")
	}
	path := filepath.Join(dir, "records-h1.jsonl")
	steps := []struct {
		add  string
		done bool
	}{
		{`{"type":"flow","id":1,"size":1000,"bytes":400}` + "\n", false},
		{`{"type":"metric","name":"x","value":1,"unit":"packets"}` + "\n" + `{"type":"flow","id":1,"size":10`, false},
		{`00,"bytes":1000}` + "\n" + `{"type":"flow","id":2,"size":50,"bytes":50}`, false},
		{"\n", true},
	}
	for i, st := range steps {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString(st.add)
		f.Close()
		if got := w.done(); got != st.done {
			t.Errorf("after step %d: done %v, want %v (pending %v)", i, got, st.done, w.pending)
		}
	}
	s.msgs[1].stream = true
	if newRecordWatch(dir, s) != nil {
		t.Error("a schedule with a stream got a watch")
	}
}
