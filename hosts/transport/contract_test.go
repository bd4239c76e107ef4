package transport

import (
	"bytes"
	"context"
	"encoding/json"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestEnvRoundTrip(t *testing.T) {
	in := &Env{
		Contract: Version, Host: "h1", Addr: netip.MustParseAddr("10.0.1.2"),
		Peers:    []Peer{{"h0", netip.MustParseAddr("10.0.0.2")}, {"h1", netip.MustParseAddr("10.0.1.2")}},
		Schedule: "/r/schedule-h1.jsonl", Records: "/r/records-h1.jsonl", RunDir: "/r",
		StartNS: 1700000000123456789, Duration: 3 * time.Second, LinkRate: 100e6, MTU: 1500,
		RTT: 2100 * time.Microsecond, Seed: 7, Workload: "homa_w4_google_all", Args: json.RawMessage(`{"k":2}`),
	}
	vars := map[string]string{}
	for _, kv := range in.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	out, err := ParseEnv(func(k string) string { return vars[k] })
	if err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(in)
	b, _ := json.Marshal(out)
	if !bytes.Equal(a, b) {
		t.Fatalf("round trip:\n in  %s\n out %s", a, b)
	}
	var args struct{ K int }
	if err := out.DecodeArgs(&args); err != nil || args.K != 2 {
		t.Fatalf("args: %+v %v", args, err)
	}
	var wrong struct{ Other int }
	if err := out.DecodeArgs(&wrong); err == nil {
		t.Fatal("an unknown arg was accepted")
	}
	if got := in.Expand("--sched={schedule} --who={host}@{addr} {rtt_ns}"); got != "--sched=/r/schedule-h1.jsonl --who=h1@10.0.1.2 2100000" {
		t.Fatalf("Expand: %q", got)
	}
}

func TestParseEnvNamesWhatIsMissing(t *testing.T) {
	_, err := ParseEnv(func(k string) string {
		if k == EnvStart {
			return "soon"
		}
		return ""
	})
	for _, want := range []string{EnvHost, EnvSchedule, EnvRecords, EnvStart} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("error %v does not name %s", err, want)
		}
	}
}

func TestScheduleRoundTrip(t *testing.T) {
	msgs := []Message{
		{ID: 1, TimeNS: 5, Src: "h1", SrcAddr: netip.MustParseAddr("10.0.1.2"), Dst: "h2", DstAddr: netip.MustParseAddr("10.0.2.2"), Size: 1000, Pattern: "dynamic"},
		{ID: 2, TimeNS: 9, Src: "h2", SrcAddr: netip.MustParseAddr("10.0.2.2"), Dst: "h1", DstAddr: netip.MustParseAddr("10.0.1.2"), Stream: true, Pattern: "static", DSCP: 46, Class: "fg", Query: 3},
	}
	var buf bytes.Buffer
	if err := WriteSchedule(&buf, msgs); err != nil {
		t.Fatal(err)
	}
	got, err := ReadSchedule("s", &buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[1] != msgs[1] || got[0] != msgs[0] {
		t.Fatalf("got %+v", got)
	}
	if out := Outgoing(got, "h2"); len(out) != 1 || out[0].ID != 2 {
		t.Fatalf("outgoing: %+v", out)
	}
	if _, err := ReadSchedule("bad.jsonl", strings.NewReader("{\"id\":1}\n{oops\n")); err == nil || !strings.Contains(err.Error(), "bad.jsonl:2:") {
		t.Fatalf("malformed line: %v", err)
	}
}

func TestDispatchKeepsTimeAndOrder(t *testing.T) {
	start := time.Now().Add(20 * time.Millisecond)
	var msgs []Message
	for i := 9; i >= 0; i-- { // out of order on purpose
		msgs = append(msgs, Message{ID: uint64(i), TimeNS: int64(i) * int64(2*time.Millisecond)})
	}
	var got []uint64
	var at []time.Duration
	st := Dispatch(context.Background(), start, "h1", msgs, func(m Message) {
		got = append(got, m.ID)
		at = append(at, time.Since(start))
	})
	for i, id := range got {
		if id != uint64(i) {
			t.Fatalf("order %v", got)
		}
		// Never early; late only by scheduling noise (generous for a busy CI machine).
		if want := time.Duration(i) * 2 * time.Millisecond; at[i] < want || at[i] > want+20*time.Millisecond {
			t.Fatalf("message %d at %v, scheduled %v", i, at[i], want)
		}
	}
	if st.Sends != 10 || st.Host != "h1" {
		t.Fatalf("stats %+v", st)
	}
}

// AppendMessage writes what encoding/json writes (host names are plain
// ASCII, for which strconv.Quote and json agree).
func TestAppendMessageIsJSON(t *testing.T) {
	for _, m := range []Message{
		{ID: 1, TimeNS: 5, Src: "h1", SrcAddr: netip.MustParseAddr("10.0.1.2"), Dst: "h2", DstAddr: netip.MustParseAddr("10.0.2.2"), Size: 1000, Pattern: "dynamic"},
		{ID: 2, TimeNS: 9, Src: "h2", SrcAddr: netip.MustParseAddr("10.0.2.2"), Dst: "h1", DstAddr: netip.MustParseAddr("10.0.1.2"), Stream: true, Pattern: "static", DSCP: 46, Class: "fg", Query: 3},
	} {
		want, _ := json.Marshal(m)
		if got := AppendMessage(nil, m); string(got) != string(want)+"\n" {
			t.Errorf("AppendMessage:\n got  %s want %s", got, want)
		}
	}
}
