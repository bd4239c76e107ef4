package emu_test

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/fabric-emu/fabric/emu/emutest"
	"github.com/fabric-emu/fabric/internal/testenv"
	"github.com/fabric-emu/fabric/tc"
	"github.com/fabric-emu/fabric/tc/tctest"
)

// TestNDPTrimmedChecksumsThroughDelayLines: trimmed headers keep a valid
// UDP checksum after a delay line, which completes a checksum the kernel
// left unfinished (NFQUEUE runs skb_checksum_help). Two senders of an emu
// star of NDP ports at 10 Mbit/s each send 30 full-size NDP DATA packets at
// once to h0, twice the rate of s0's port to h0, which trims. "down":
// only the links toward the hosts have delay lines, so the port trims
// packets whose checksum is not ready yet and the line after it completes
// them; "both": the senders' lines complete the checksums before the port,
// which must then write a full one. At h0, after the last line, every
// captured trimmed header has a ready and valid UDP checksum, the socket
// receives every NDP packet captured, and the host counts no checksum
// error.
func TestNDPTrimmedChecksumsThroughDelayLines(t *testing.T) {
	testenv.RequireRoot(t)
	for _, sc := range []struct{ name, delay string }{
		{"down", "{down: 1ms}"},
		{"both", "1ms"},
	} {
		t.Run(sc.name, func(t *testing.T) { testTrimmedChecksums(t, sc.name, sc.delay) })
	}
}

// fullSize is a full-size frame on a 1500-byte MTU veth.
const fullSize = 1514

func testTrimmedChecksums(t *testing.T, name, delay string) {
	ctx := context.Background()
	lab := emutest.Up(t, fmt.Sprintf("name: %s\ntopology: {kind: star, hosts: 3}\nlinks: {rate: 10Mbit, delay: %s}\nports: {ndp: {data: 8pkts}}\n",
		emutest.Name("tcs"+name), delay))
	rx := lab.Graph.Node("h0")
	sink := tctest.ListenUDP(t, lab, "h0", 7000)
	capture := tctest.CaptureIn(t, lab, "h0", rx.Ifaces[0].Name)
	errorsBefore := tctest.UDPCounter(t, lab, "h0", "InCsumErrors")

	var wg sync.WaitGroup
	for _, from := range []string{"h1", "h2"} {
		wg.Go(func() {
			_, err := tctest.SendUDP(ctx, lab, tctest.UDPStream{From: from, To: netip.AddrPortFrom(rx.Addr, 7000),
				Rate: 1e9, Size: fullSize, NDPFlags: tc.NDPFlagData, Duration: 29 * fullSize * 8 * time.Second / 1e9})
			if err != nil {
				t.Errorf("send from %s: %v", from, err)
			}
		})
	}
	wg.Wait()
	time.Sleep(500 * time.Millisecond) // 60 frames at 1.2 ms and the 1 ms lines drain
	frames, received := capture.Frames(), len(sink.Received())

	var ndp, trimmed, bad int
	for _, f := range frames {
		if !tctest.IsNDP(f) {
			continue
		}
		ndp++
		if f.Data[43]&tc.NDPFlagChopped == 0 {
			continue
		}
		trimmed++
		if err := tctest.CheckTrimmed(f); err != nil || f.CsumNotReady {
			bad++
			t.Errorf("trimmed frame %d: checksum not ready %v, %v", trimmed, f.CsumNotReady, err)
		}
	}
	csumErrs := tctest.UDPCounter(t, lab, "h0", "InCsumErrors") - errorsBefore
	t.Logf("delay %s: h0 captured %d NDP frames, %d trimmed (%d with a bad UDP checksum); its socket received %d; UDP InCsumErrors +%d",
		delay, ndp, trimmed, bad, received, csumErrs)
	if trimmed == 0 {
		t.Errorf("nothing trimmed: the incast did not overflow the data queue")
	}
	if received != ndp || csumErrs != 0 {
		t.Errorf("h0's socket received %d of the %d NDP frames that arrived; %d checksum errors", received, ndp, csumErrs)
	}
}
