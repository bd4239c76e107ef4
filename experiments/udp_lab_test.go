package experiments

import (
	"fmt"
	"testing"
	"time"

	"github.com/fabric-emu/fabric/hosts/transport"
	"github.com/fabric-emu/fabric/hosts/transport/transporttest"
	"github.com/fabric-emu/fabric/internal/testenv"
)

// The udp transport as fabric runs it, `fabric transport udp` on every
// host of a lab, carrying the poisson pattern: every datagram is delivered
// once (a 100 Mbit/s star at 20 % load drops none), as big as scheduled
// and no earlier than its scheduled time, and each sender writes its
// lateness with its percentiles.
//
// UDP has no retransmission, so a saturated CPU that overflows a socket
// loses datagrams: the test runs alone, not beside the parallel tests,
// and a lost datagram is retried only when the monitor flagged the trial.
func TestUDPDeliversEveryDatagramOnce(t *testing.T) {
	testenv.RequireRoot(t)
	spec, err := Parse("udp.yaml", []byte(`name: udp
lab: {name: udp, topology: {kind: star, hosts: 3}, links: {rate: 100Mbit}}
schemes: {udp: {transport: udp, args: {ecn: true}}}
traffic: {pattern: poisson, client: h0, servers: [h1, h2], size: 1000B, load: 0.2}
duration: 3s
`), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var set *transport.Set
	testenv.Retry(t, 2, 0, func(a *testenv.Attempt) {
		res := runOnce(t, spec, Options{Seed: 3}, 2*time.Minute)
		stalledTrials(a, res)
		var sched map[uint64]transport.Message
		sched, set = transporttest.ReadTrial(t, res.Trials[0].Dir)
		if len(sched) < 3000 {
			t.Fatalf("only %d datagrams scheduled, want about 4900", len(sched))
		}
		transporttest.DeliveredOnce(a, sched, set, func(f transport.Flow, m transport.Message) string {
			switch {
			case f.Bytes != m.Size:
				return fmt.Sprintf("%d bytes arrived of %d", f.Bytes, m.Size)
			case f.EndNS <= f.StartNS:
				return fmt.Sprintf("arrived at %d, before its send time %d", f.EndNS, f.StartNS)
			case f.CC != "udp":
				return fmt.Sprintf("cc %q, want udp", f.CC)
			}
			return ""
		})
	})
	if t.Failed() || set == nil {
		return
	}
	// Every host writes its sender record, h0, which sends nothing, too.
	if len(set.Senders) != 3 {
		t.Fatalf("%d sender records, want one per host", len(set.Senders))
	}
	for _, s := range set.Senders {
		t.Logf("%s: %d sends, late p50 %v p99 %v max %v", s.Host, s.Sends, time.Duration(s.LateP50NS), time.Duration(s.LateP99NS), time.Duration(s.LateMaxNS))
		if s.Host == "h0" {
			if s.Sends != 0 {
				t.Errorf("h0 sent %d, want none", s.Sends)
			}
			continue
		}
		if s.LateP99NS <= 0 || s.LateP99NS < s.LateP50NS || s.LateMaxNS < s.LateP99NS-int64(time.Microsecond) {
			t.Errorf("%s: lateness percentiles out of order: %+v", s.Host, s)
		}
	}
}
