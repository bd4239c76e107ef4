package transport

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	w, err := Create(dir, "h1")
	if err != nil {
		t.Fatal(err)
	}
	w.Flow(Flow{ID: 1, Pattern: "dynamic", Src: "h2", Dst: "h1", Size: 1000, Bytes: 1000, CC: "dctcp", StartNS: 10, EndNS: 25})
	w.Query(Query{ID: 2, Aggregator: "h1", Workers: 8, Size: 64000, StartNS: 1, EndNS: 9})
	w.Probe(Probe{Seq: 3, Src: "h2", Dst: "h1", SendNS: 5, RecvNS: 7})
	w.Sample(Sample{FlowID: 4, TNS: 100, Bytes: 5})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Flows) != 1 || s.Flows[0].FCTNanos() != 15 || s.Flows[0].CC != "dctcp" {
		t.Fatalf("flows: %+v", s.Flows)
	}
	if len(s.Queries) != 1 || s.Queries[0].Workers != 8 || len(s.Probes) != 1 || s.Probes[0].RecvNS != 7 || len(s.Samples) != 1 || s.Samples[0].FlowID != 4 {
		t.Fatalf("set: %+v", s)
	}
}

func TestBadLineNamesFileAndLine(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "records-h1.jsonl"), []byte("{\"type\":\"flow\",\"id\":1}\n{\"type\":\"bogus\"}\n"), 0o644)
	_, err := ReadDir(dir)
	if err == nil || !strings.Contains(err.Error(), "records-h1.jsonl:2") {
		t.Fatalf("want file:line error, got %v", err)
	}
}
