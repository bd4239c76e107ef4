package endpoint

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"net/netip"

	"fabric/hosts/workload"
	"fabric/internal/units"
	"fabric/internal/yamlfile"
)

func TestDerangement(t *testing.T) {
	for _, n := range []int{2, 3, 16, 128} {
		d := Derangement(n, 7)
		seen := make([]bool, n)
		for i, v := range d {
			if v == i {
				t.Fatalf("n=%d: host %d sends to itself: %v", n, i, d)
			}
			if seen[v] {
				t.Fatalf("n=%d: host %d receives twice: %v", n, v, d)
			}
			seen[v] = true
		}
		if !reflect.DeepEqual(d, Derangement(n, 7)) {
			t.Errorf("n=%d: same seed, different derangement", n)
		}
	}
	if Derangement(1, 1) != nil {
		t.Error("n=1 has no derangement")
	}
	// Uniformity, roughly: over many seeds every target is chosen by host 0
	// about equally often (each of the 3 others: 1/3).
	count := map[int]int{}
	for s := range uint64(3000) {
		count[Derangement(4, s)[0]]++
	}
	for v := 1; v < 4; v++ {
		if c := count[v]; c < 850 || c > 1150 {
			t.Errorf("host 0 sent to %d in %d of 3000 derangements, want ~1000", v, c)
		}
	}
}

func TestDSCPPolicy(t *testing.T) {
	p := DSCPPolicy{Default: 0, Classes: []SizeClass{{Below: 100 * units.KB, Value: 10}, {Below: 10 * units.KB, Value: 56}}}
	for size, want := range map[int64]DSCP{1: 56, 9999: 56, 10000: 10, 99999: 10, 100000: 0, 1 << 30: 0} {
		if got := p.For(size); got != want {
			t.Errorf("For(%d) = %v, want %v", size, got, want)
		}
	}
	for in, want := range map[string]DSCP{"CS7": 56, "cs0": 0, "EF": 46, "AF41": 34, "63": 63, "0x2e": 46} {
		if got, err := ParseDSCP(in); err != nil || got != want {
			t.Errorf("ParseDSCP(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"CS8", "64", "fast", ""} {
		if _, err := ParseDSCP(in); err == nil {
			t.Errorf("ParseDSCP(%q) accepted", in)
		}
	}
	if tos := DSCP(56).TOS(); tos != 0xe0 || tos&3 != 0 {
		t.Errorf("CS7 TOS = %#x, want 0xe0 with the ECN bits clear", tos)
	}
}

func TestProtocolRoundTrip(t *testing.T) {
	h := hello{Kind: kindSink, DSCP: 46, FlowID: 1<<40 | 7, Pattern: "permutation", CC: "cubic", Host: "h12"}
	got, err := readHello(bytes.NewReader(h.encode()))
	if err != nil || got != h {
		t.Fatalf("hello round trip: %+v, %v", got, err)
	}
	a, err := readAck(bytes.NewReader(ack{OK: true, Host: "h3", CC: "bbr"}.encode()))
	if err != nil || a.Host != "h3" || a.CC != "bbr" {
		t.Fatalf("ack round trip: %+v, %v", a, err)
	}
	_, err = readAck(bytes.NewReader(ack{Err: "no dctcp here"}.encode()))
	var refused serverRefused
	if !errors.As(err, &refused) || !strings.Contains(err.Error(), "no dctcp here") {
		t.Fatalf("refusal: %v", err)
	}
	if _, err := readHello(bytes.NewReader([]byte("GET / HTTP/1.1\r\n\r\n"))); err == nil {
		t.Error("a stranger's bytes were taken for a hello")
	}
	p := probeMsg{seq: 9, sendNS: 123456789, dscp: 56, host: "h1"}
	buf := p.encode(make([]byte, 1472))
	if q, ok := decodeProbe(buf[:1472]); !ok || q != p {
		t.Errorf("probe round trip: %+v %v", q, ok)
	}
}

// TestArgsRoundTrip: the command line the runner builds with Config.Args
// parses back into the same Config.
func TestArgsRoundTrip(t *testing.T) {
	wl, err := workload.Open("hull_1k_10m", nil)
	if err != nil {
		t.Fatal(err)
	}
	p1, _ := ParsePeer("h1=10.0.0.2")
	p2, _ := ParsePeer("10.0.1.2")
	cfgs := []Config{
		{Pattern: Dynamic, Host: "h0", RunDir: "/tmp/r", Peers: []Peer{p1, p2}, Seed: 3, Duration: 20e9, CC: "cubic", ECN: ECNOn,
			DSCP:     DSCPPolicy{Default: 8, Classes: []SizeClass{{Below: 10 * units.KB, Value: 56}}},
			Workload: wl, Load: 0.4, LinkRate: 100 * units.Mbit, ConnsPerServer: 4},
		{Pattern: Incast, Host: "agg", RunDir: "/r", Peers: []Peer{p1}, Size: 64 * units.KB, Rounds: 10, Gap: 5e6},
		{Pattern: Server, Host: "h1", RunDir: "/r", Port: 6000, SampleInterval: 50e6},
		{Pattern: Probe, Host: "h1", RunDir: "/r", Peers: []Peer{p2}, Duration: 1e9, ProbeInterval: 2e6, ProbeSize: 1000},
	}
	for _, want := range cfgs {
		got, err := ParseArgs(want.Args())
		if err != nil {
			t.Fatalf("%v: %v", want.Args(), err)
		}
		want.setDefaults()
		got.Log, want.Log = nil, nil
		if !reflect.DeepEqual(got, want) {
			t.Errorf("round trip of %v:\n got %+v\nwant %+v", want.Args(), got, want)
		}
	}
}

// TestBadInput: a load >= 1 and a non-monotone workload are rejected; the
// workload error names file and line, the load error names the field (an
// experiment file loader places it at its line with yamlfile.Doc.Wrap).
func TestBadInput(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.cdf")
	os.WriteFile(bad, []byte("# discrete: false\n100 0.5\n200 0.4\n300 1\n"), 0o644)
	base := []string{"dynamic", "--host", "h0", "--run-dir", "/tmp", "--peer", "10.0.0.2", "--link-rate", "100Mbit", "--duration", "1s"}

	_, err := ParseArgs(append(base, "--workload", bad, "--load", "0.4"))
	var ye *yamlfile.Error
	if !errors.As(err, &ye) || ye.Line != 3 || !strings.HasPrefix(err.Error(), bad+":3: cdf:") {
		t.Errorf("non-monotone workload: %v", err)
	}
	for _, load := range []string{"1", "1.5", "0", "-0.2"} {
		_, err := ParseArgs(append(base, "--workload", "hull_1k_10m", "--load", load))
		if err == nil || !strings.Contains(err.Error(), "--load") {
			t.Errorf("load %s: %v", load, err)
		}
	}
	// Through an experiment file: the field error lands on its line.
	cfg := Config{Pattern: Dynamic, Host: "h0", RunDir: "/tmp", Peers: []Peer{{Addr: mustAddr("10.0.0.2")}}, Duration: 1e9,
		Workload: mustWorkload(t), Load: 1, LinkRate: units.Mbit}
	var doc struct {
		Load float64 `yaml:"load"`
	}
	d, derr := yamlfile.Decode("exp.yaml", []byte("pattern: x\n\nload: 1\n")[11:], &doc)
	if derr != nil {
		t.Fatal(derr)
	}
	werr := d.Wrap(cfg.Validate())
	if !errors.As(werr, &ye) || ye.Line != 2 || ye.Field != "load" {
		t.Errorf("load through a file: %v", werr)
	}
	for _, args := range [][]string{
		{"flood", "--host", "h0", "--run-dir", "/tmp"},
		{"incast", "--host", "h0", "--run-dir", "/tmp", "--peer", "10.0.0.2", "--rounds", "3"},
		{"static", "--host", "h0", "--run-dir", "/tmp", "--peer", "h2"},
		{"probe", "--host", "h0", "--run-dir", "/tmp", "--peer", "10.0.0.2", "--duration", "1s", "--dscp", "CS9"},
	} {
		if _, err := ParseArgs(args); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}

func mustWorkload(t *testing.T) *workload.CDF {
	wl, err := workload.Open("hull_1k_10m", nil)
	if err != nil {
		t.Fatal(err)
	}
	return wl
}

func mustAddr(s string) (a netip.Addr) { p, _ := ParsePeer(s); return p.Addr }
