package tcp_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fabric-emu/fabric/experiments"
	"github.com/fabric-emu/fabric/hosts"
	"github.com/fabric-emu/fabric/hosts/transport"
	"github.com/fabric-emu/fabric/hosts/transport/transporttest"
	"github.com/fabric-emu/fabric/internal/testenv"
)

// The tests run the transport as fabric runs it: `fabric transport tcp` on
// every host of a real lab, started by an experiment, with the schedule and
// environment of the contract.

func TestMain(m *testing.M) { testenv.RunWithFabric(m, hosts.EnvFabricBinary) }

// run runs an experiment file's only point once and returns its trial
// directory.
func run(t *testing.T, yaml string) string {
	t.Helper()
	testenv.RequireRoot(t)
	spec, err := experiments.Parse(t.Name()+".yaml", []byte(yaml), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := experiments.Run(ctx, spec, experiments.Options{Out: t.TempDir(), LabPrefix: fmt.Sprintf("ttcp%d", os.Getpid()%10000), Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	return res.Trials[0].Dir
}

// Every message, from 1 byte to 10 MB, between every pair of hosts, is
// delivered once, whole, and recorded with its scheduled start.
func TestDeliversEveryMessageOnce(t *testing.T) {
	cdf := filepath.Join(t.TempDir(), "sizes.cdf")
	if err := os.WriteFile(cdf, []byte("# discrete: true\n1 0.3\n1000 0.6\n100000 0.9\n10000000 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := run(t, fmt.Sprintf(`name: every
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
}

// Long-lived flows (streams) run until SIGTERM; their samples show two
// flows sharing a 100 Mbit/s port.
func TestStreamsAreSampled(t *testing.T) {
	dir := run(t, `name: streams
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
	t.Logf("two streams: %.1f Mbit/s together", total/1e6)
	if total < 85e6 || total > 101e6 {
		t.Errorf("two streams through a 100 Mbit/s port carried %.1f Mbit/s", total/1e6)
	}
}
