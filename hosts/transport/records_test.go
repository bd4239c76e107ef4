package transport

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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

// A record must be an object of a known type with its type's required
// fields, each of its JSON type; optional fields may be left out.
func TestCheckRecord(t *testing.T) {
	for line, want := range map[string]string{
		`{"type":"flow","id":1,"src":"h1","dst":"h0","size":10,"bytes":10,"start_ns":1,"end_ns":2}`:                         "",
		`{"type":"flow","id":1,"src":"h1","dst":"h0","size":10,"bytes":10,"start_ns":1,"end_ns":2,"class":"rpc","query":0}`: "",
		`{"type":"metric","name":"retransmissions","value":3,"unit":"packets"}`:                                             "",
		`{"type":"metric","name":"window","value":8.5,"unit":"packets","t_ns":5}`:                                           "",
		`{"type":"sender","host":"h1","sends":0,"late_over_1ms":0,"late_mean_ns":0,"late_max_ns":0}`:                        "",
		`{"type":"sample","flow_id":4,"src":"h1","dst":"h0","t_ns":100,"bytes":5}`:                                          "",
		`{"type":"flow","id":1}`: "flow record without src, dst, size, bytes, start_ns, end_ns",
		`{"type":"flow","id":"1","src":"h1","dst":"h0","size":10,"bytes":10,"start_ns":1,"end_ns":2}`: "cannot unmarshal string",
		`{"type":"metric","name":"x","value":1}`:                                                      "metric record without unit",
		`{"type":"bogus"}`:                                                                            `unknown record type "bogus"`,
		`{"id":1}`:                                                                                    `no "type"`,
		`{"type":"flow","id":1,`:                                                                      "unexpected end",
	} {
		err := CheckRecord([]byte(line))
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v", line, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: error %v, want one saying %q", line, err, want)
		}
	}
}

// Records stay in the buffer until the write-through instant, which
// flushes them; a record after it is in the file at once.
func TestWriteThroughFrom(t *testing.T) {
	dir := t.TempDir()
	w, err := Create(dir, "h0")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w.WriteThroughFrom(time.Now().Add(200 * time.Millisecond))
	lines := func() int {
		b, _ := os.ReadFile(filepath.Join(dir, FileName("h0")))
		return bytes.Count(b, []byte{'\n'})
	}
	w.Flow(Flow{ID: 1, Size: 10, Bytes: 10})
	if n := lines(); n != 0 {
		t.Errorf("%d lines in the file before the instant, want 0", n)
	}
	deadline := time.Now().Add(5 * time.Second)
	for lines() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	w.Flow(Flow{ID: 2, Size: 10, Bytes: 10})
	if n := lines(); n != 2 {
		t.Errorf("%d lines in the file after the instant and a second record, want 2", n)
	}
}
