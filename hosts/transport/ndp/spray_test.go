package ndp

import (
	"context"
	"encoding/binary"
	"math/rand/v2"
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

// udpChecksum agrees with RFC 768 computed word by word, for datagrams of
// every length parity, and a datagram with it verifies (sums to all ones).
func TestUDPChecksum(t *testing.T) {
	src, dst := netip.MustParseAddr("10.0.1.2"), netip.MustParseAddr("10.0.2.2")
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{0, 1, 2, 7, 8, 9, 20, 1472, 8971, 8972} {
		payload := make([]byte, n)
		for i := range payload {
			payload[i] = byte(rng.Uint32())
		}
		hdr := []byte{0xc0, 0x00, 0x10, 0x04, byte((8 + n) >> 8), byte(8 + n), 0, 0}
		got := udpChecksum(src, dst, hdr, payload)
		binary.BigEndian.PutUint16(hdr[6:], got)
		datagram := append(append([]byte{}, hdr...), payload...)
		if len(datagram)%2 == 1 {
			datagram = append(datagram, 0)
		}
		s4, d4 := src.As4(), dst.As4()
		sum := uint32(17 + 8 + n)
		for _, b := range [][]byte{s4[:], d4[:], datagram} {
			for i := 0; i < len(b); i += 2 {
				sum += uint32(b[i])<<8 | uint32(b[i+1])
			}
		}
		for sum > 0xffff {
			sum = sum&0xffff + sum>>16
		}
		if sum != 0xffff || got == 0 {
			t.Errorf("%d-byte payload: checksum %#04x does not verify (sum %#04x)", n, got, sum)
		}
	}
}
