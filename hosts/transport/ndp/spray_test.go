package ndp

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/fabric-emu/fabric/emu"
	"github.com/fabric-emu/fabric/hosts/transport"
	"github.com/fabric-emu/fabric/internal/testenv"
	"github.com/fabric-emu/fabric/tc"
)

// TestLabSprayEvensCoreLinks: one NDP message from h0 in pod 0 of a k=4
// fat tree to h4 in pod 1 has four equal-cost paths, one through each core
// switch, and its DATA spreads over them within ±10 % of even (issue 13:
// per-packet multipath, NDP §3). Each core's share is the DATA packets its
// port toward pod 1 sent (the NDP port's data band, tc's count).
func TestLabSprayEvensCoreLinks(t *testing.T) {
	testenv.RequireRoot(t)
	var perCore map[string]uint64
	msgs := func(addr map[string]netip.Addr) []transport.Message {
		return []transport.Message{{ID: 1, Src: "h0", SrcAddr: addr["h0"], Dst: "h4", DstAddr: addr["h4"], Size: 8 << 20, Pattern: "spray"}}
	}
	res := runLab(t, labRun{name: "spray", topology: "{kind: fattree, k: 4}", links: "rate: 100Mbit", msgs: msgs,
		limit: 20 * time.Second, inspect: func(lab *emu.Lab) { perCore = coreDataPackets(t, lab, "p1") }})
	res.check(t)
	var total uint64
	for _, n := range perCore {
		total += n
	}
	t.Logf("8 MB h0→h4 in %v: DATA packets per core link toward pod 1 %v (total %d, endpoints sent %d)", res.elapsed.Round(time.Millisecond), perCore, total, res.stats.DataSent)
	if len(perCore) != 4 || total == 0 {
		t.Fatalf("want 4 core links that carried DATA, got %v", perCore)
	}
	even := float64(total) / float64(len(perCore))
	for core, n := range perCore {
		if dev := float64(n)/even - 1; dev < -0.1 || dev > 0.1 {
			t.Errorf("core %s carried %d DATA packets, %+.1f %% from an even %.0f", core, n, 100*dev, even)
		}
	}
}

// coreDataPackets is, per core switch, the DATA packets its port toward
// pod sent (the NDP port's data band).
func coreDataPackets(t *testing.T, lab *emu.Lab, pod string) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	for _, n := range lab.Graph.Nodes {
		if n.Tier != "core" {
			continue
		}
		for _, i := range n.Ifaces {
			if !strings.HasPrefix(i.Peer.Node.Name, pod) {
				continue
			}
			target, err := lab.PortTarget(n.Name, i.Name)
			if err != nil {
				t.Fatal(err)
			}
			st, err := tc.Stats(context.Background(), target)
			if err != nil || len(st.Bands) != 2 {
				t.Fatalf("port %s:%s: %v (bands %d)", n.Name, i.Name, err, len(st.Bands))
			}
			out[n.Name] += st.Bands[1].Packets
		}
	}
	return out
}
