package experiments

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fabric-emu/fabric/hosts/transport"
	"github.com/fabric-emu/fabric/hosts/transport/transporttest"
	"github.com/fabric-emu/fabric/results/report"
)

// The tcp transport's tests run it as fabric runs it: `fabric transport
// tcp` on every host of a real lab, started by an experiment, with the
// schedule and environment of the contract.

// runTCP runs an experiment file's only point once and returns its trial
// directory.
func runTCP(t *testing.T, yaml string) string {
	t.Helper()
	spec, err := Parse(t.Name()+".yaml", []byte(yaml), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return runOnce(t, spec, Options{Seed: 5}, 3*time.Minute).Trials[0].Dir
}

// Every message, from 1 byte to 10 MB, between every pair of hosts, is
// delivered once, whole, and recorded with its scheduled start.
func TestDeliversEveryMessageOnce(t *testing.T) {
	// Exactness, not timing: it runs beside the other waiting tests.
	t.Parallel()
	cdf := filepath.Join(t.TempDir(), "sizes.cdf")
	if err := os.WriteFile(cdf, []byte("# discrete: true\n1 0.3\n1000 0.6\n100000 0.9\n10000000 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := runTCP(t, fmt.Sprintf(`name: every
lab: {name: every, topology: {kind: star, hosts: 3}, links: {rate: 100Mbit}}
schemes: {tcp: {cc: cubic, args: {conns: 2}}}
traffic: {pattern: dynamic, workload: %s, load: 0.3, client: all, servers: all}
duration: 4s
`, cdf))
	sched, set := transporttest.ReadTrial(t, dir)
	if len(sched) < 20 {
		t.Fatalf("only %d messages scheduled", len(sched))
	}
	transporttest.DeliveredOnce(t, sched, set, func(f transport.Flow, _ transport.Message) string {
		switch {
		case f.StartNS >= f.EndNS:
			return fmt.Sprintf("end %d not after start %d", f.EndNS, f.StartNS)
		case f.CC != "cubic":
			return fmt.Sprintf("sent with %q, want cubic", f.CC)
		}
		return ""
	})
	if len(set.Senders) != 3 {
		t.Fatalf("%d sender records, want one per host", len(set.Senders))
	}
	t.Logf("%d messages delivered once each; lateness: %+v", len(sched), set.Senders)
	// Every message is in, so the drain ended before its 2 s: fabric's
	// transports write their records through from the schedule's end.
	var meta trialMeta
	if b, err := os.ReadFile(filepath.Join(dir, "meta.json")); err != nil || json.Unmarshal(b, &meta) != nil {
		t.Fatalf("meta.json: %v", err)
	}
	drain, _ := time.ParseDuration(meta.Drain)
	drained, _ := time.ParseDuration(meta.Drained)
	var last int64
	for _, f := range set.Flows {
		last = max(last, f.EndNS)
	}
	lastIn := time.Duration(last - meta.ScheduleStartNS - 4*time.Second.Nanoseconds()) // after the schedule's end
	t.Logf("drained %v of %v; the last message ended %v after the schedule", drained, drain, lastIn)
	if drain != 2*time.Second || (lastIn < drain-2*drainPoll && drained >= drain) {
		t.Errorf("waited %v of a %v drain with every message recorded %v after the schedule's end, want less", drained, drain, lastIn)
	}
}

// Long-lived flows (streams) run until SIGTERM, and their 100 ms samples
// count what crossed the network: two flows into h0 share its port, and
// the bytes their samples count, over the samples' span, are the port's
// own byte count over the traffic (fidelity.json) times TCP's payload per
// frame, 1448 of 1514 bytes (MSS with timestamps at a 1500-byte MTU).
// Both windows cover the same steady state of a port kept busy by two
// bulk flows; 3 % allows for the ends they differ by (slow start, the
// last sample) and the ACK-clocked bursts a 100 ms sample may cut.
func TestStreamsAreSampled(t *testing.T) {
	dir := runTCP(t, `name: streams
lab: {name: streams, topology: {kind: star, hosts: 3}, links: {rate: 100Mbit}}
schemes: {tcp: {cc: cubic}}
traffic: {pattern: static, client: [h1, h2], servers: h0}
duration: 4s
`)
	_, set := transporttest.ReadTrial(t, dir)
	first, last := map[uint64]transport.Sample{}, map[uint64]transport.Sample{}
	for _, s := range set.Samples {
		if f, ok := first[s.FlowID]; !ok || s.TNS < f.TNS {
			first[s.FlowID] = s
		}
		if l, ok := last[s.FlowID]; !ok || s.TNS > l.TNS {
			last[s.FlowID] = s
		}
	}
	if len(first) != 2 {
		t.Fatalf("samples of %d flows, want 2", len(first))
	}
	var total float64
	for id, f := range first {
		l := last[id]
		bps := float64(l.Bytes-f.Bytes) * 8 / (float64(l.TNS-f.TNS) / 1e9)
		total += bps
		if n := (l.TNS - f.TNS) / int64(100*time.Millisecond); n < 20 {
			t.Errorf("flow %d: samples span only %d intervals", id, n)
		}
	}
	var fid report.Fidelity
	if b, err := os.ReadFile(filepath.Join(dir, "fidelity.json")); err != nil {
		t.Fatal(err)
	} else if err := json.Unmarshal(b, &fid); err != nil {
		t.Fatal(err)
	}
	if len(fid.Ports) != 1 {
		t.Fatalf("%d watched ports, want h0's alone: %+v", len(fid.Ports), fid.Ports)
	}
	wire := fid.Ports[0].AchievedBPS
	want := wire * 1448 / 1514
	t.Logf("two streams: %.2f Mbit/s in their samples; the port %s sent %.2f Mbit/s, %.2f of it payload", total/1e6, fid.Ports[0].Port, wire/1e6, want/1e6)
	if e := total/want - 1; e < -0.03 || e > 0.03 {
		t.Errorf("the samples count %.2f Mbit/s, the port's payload %.2f Mbit/s: %+.1f %%, want within 3 %%", total/1e6, want/1e6, 100*e)
	}
}
