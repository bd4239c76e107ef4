package capture_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/fabric-emu/fabric/internal/testenv"
	"github.com/fabric-emu/fabric/results/capture"
	"github.com/fabric-emu/fabric/results/internal/testlab"
	"github.com/fabric-emu/fabric/results/pcapfile"
)

func TestFilterProgramAssembles(t *testing.T) {
	for _, f := range []capture.Filter{
		{}, {Direction: capture.In}, {Direction: capture.Out, UDPOnly: true, DstPort: 9000}, {IPv4Only: true},
	} {
		prog, err := f.Program(128)
		if err != nil {
			t.Fatalf("%+v: %v", f, err)
		}
		// The accept instruction returns the snap length.
		if last := prog[len(prog)-2]; last.Op != 0x06 || last.K != 128 {
			t.Fatalf("%+v: accept is %+v, want ret #128", f, last)
		}
	}
}

func TestPointFileBase(t *testing.T) {
	p := capture.Point{NetNS: "/run/netns/fab.lab.s0", Ifname: "eth1", Label: "s0:eth1"}
	if got := p.FileBase(); got != "s0_eth1" {
		t.Fatalf("FileBase = %q", got)
	}
	p.Label = ""
	if got := p.FileBase(); got != "fab.lab.s0_eth1" {
		t.Fatalf("FileBase without label = %q", got)
	}
}

// readAll counts the packets of a pcap with our reader and returns their
// UDP payload sequence numbers (first 8 payload bytes) and timestamps.
func readAll(t *testing.T, path string) (seqs []uint64, ts []int64) {
	t.Helper()
	r, err := pcapfile.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for {
		p, err := r.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Data) >= 50 && p.Data[23] == 17 {
			seqs = append(seqs, binary.BigEndian.Uint64(p.Data[42:]))
		}
		ts = append(ts, p.TimeNS)
	}
}

// TestCaptureInNamespace captures real lab traffic inside a router
// namespace: direction filters, snap length, nanosecond timestamps, and a
// file that tshark reads with the same packet count and timestamps.
func TestCaptureInNamespace(t *testing.T) {
	testenv.RequireRoot(t)
	lab := testlab.New(t, testlab.Spec{Senders: 1, RateBPS: 100e6})
	dir := t.TempDir()
	ctx := context.Background()
	opts := func(d capture.Direction) capture.Options {
		return capture.Options{Filter: capture.Filter{Direction: d, UDPOnly: true, DstPort: 9000}}
	}
	inAtSender, err := capture.Start(ctx, lab.Point(lab.SenderIfs[0]), dir, opts(capture.In))
	if err != nil {
		t.Fatal(err)
	}
	outPt := lab.Point(lab.ShapedIf)
	outPt.Label = "r:out"
	outAtRx, err := capture.Start(ctx, outPt, dir, opts(capture.Out))
	if err != nil {
		t.Fatal(err)
	}
	wrongPt := lab.Point(lab.ShapedIf)
	wrongPt.Label = "r:in"
	inAtRx, err := capture.Start(ctx, wrongPt, dir, opts(capture.In))
	if err != nil {
		t.Fatal(err)
	}
	rx, err := lab.ListenUDP(9000)
	if err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	noise, err := lab.ListenUDP(9001)
	if err != nil {
		t.Fatal(err)
	}
	defer noise.Close()
	tx, err := lab.DialUDP(0, 9000)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	other, err := lab.DialUDP(0, 9001) // filtered out by port
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	const n = 300
	payload := make([]byte, 1472)
	for i := 0; i < n; i++ {
		binary.BigEndian.PutUint64(payload, uint64(i))
		if _, err := tx.Write(payload); err != nil {
			t.Fatal(err)
		}
		other.Write(payload)
		time.Sleep(200 * time.Microsecond)
	}
	time.Sleep(50 * time.Millisecond) // the 100 Mbit port drains
	sent := time.Now()
	var stats []capture.Stats
	for _, s := range []*capture.Session{inAtSender, outAtRx, inAtRx} {
		st, err := s.Stop()
		if err != nil {
			t.Fatal(err)
		}
		stats = append(stats, st)
		t.Logf("%s: written %d kernel %d drops %d", st.Label, st.Written, st.KernelPackets, st.Drops)
	}
	for i, want := range []int64{n, n, 0} {
		st := stats[i]
		if st.Written != want || st.Drops != 0 {
			t.Errorf("%s: wrote %d packets with %d drops, want %d and 0", st.Label, st.Written, st.Drops, want)
		}
		seqs, ts := readAll(t, st.File)
		if int64(len(ts)) != st.Written {
			t.Errorf("%s: file holds %d packets, Stats says %d", st.Label, len(ts), st.Written)
		}
		for j, s := range seqs {
			if s != uint64(j) {
				t.Fatalf("%s: packet %d carries sequence %d", st.Label, j, s)
			}
		}
		// Kernel timestamps are wall-clock nanoseconds from this run.
		for _, v := range ts {
			if d := sent.UnixNano() - v; d < 0 || d > int64(10*time.Second) {
				t.Fatalf("%s: timestamp %d is %v before the end of sending", st.Label, v, time.Duration(d))
			}
		}
		if want > 0 {
			checkTshark(t, st.File, len(ts), ts[0])
		}
	}
	// Headers only: 128 bytes kept of 1514.
	r, _ := pcapfile.Open(stats[0].File)
	p, _ := r.Next()
	if len(p.Data) != capture.DefaultSnaplen || p.OrigLen != 1514 {
		t.Errorf("snap: kept %d of %d bytes, want %d of 1514", len(p.Data), p.OrigLen, capture.DefaultSnaplen)
	}
	r.Close()
	back, err := capture.ReadStats(dir)
	if err != nil || len(back) != 3 {
		t.Fatalf("ReadStats: %v, %d files", err, len(back))
	}
}

// checkTshark asks tshark for the packet count and the first timestamp.
func checkTshark(t *testing.T, file string, count int, firstNS int64) {
	t.Helper()
	if _, err := exec.LookPath("tshark"); err != nil {
		testenv.SkipOrFail(t, "tshark not installed (apt-get install tshark)")
		return
	}
	out, err := exec.Command("tshark", "-r", file, "-T", "fields", "-e", "frame.time_epoch").Output()
	if err != nil {
		t.Fatalf("tshark -r %s: %v", file, err)
	}
	lines := strings.Fields(string(out))
	if len(lines) != count {
		t.Fatalf("tshark counts %d packets in %s, we wrote %d", len(lines), file, count)
	}
	want := fmt.Sprintf("%d.%09d", firstNS/1e9, firstNS%1e9)
	if lines[0] != want {
		t.Fatalf("tshark's first timestamp %s, ours %s (nanosecond pcap?)", lines[0], want)
	}
}

func TestParsePoint(t *testing.T) {
	ns := func(node string) string { return "/run/netns/fab.lab." + node }
	p, d, err := capture.ParsePoint("s0:eth5:out", ns)
	if err != nil || p.NetNS != "/run/netns/fab.lab.s0" || p.Ifname != "eth5" || p.Label != "s0:eth5" || d != capture.Out {
		t.Fatalf("ParsePoint = %+v %v %v", p, d, err)
	}
	if _, d, _ := capture.ParsePoint("h1:eth0", ns); d != capture.Both {
		t.Fatalf("default direction %v", d)
	}
	for _, bad := range []string{"s0", "s0:", ":eth1", "s0:eth1:sideways", "a:b:c:d"} {
		if _, _, err := capture.ParsePoint(bad, ns); err == nil {
			t.Errorf("ParsePoint(%q) accepted", bad)
		}
	}
}
