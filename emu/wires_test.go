package emu_test

import (
	"context"
	"errors"
	"math"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fabric-emu/fabric/emu"
	"github.com/fabric-emu/fabric/emu/emutest"
	"github.com/fabric-emu/fabric/internal/snmp"
	"github.com/fabric-emu/fabric/internal/testenv"
	"github.com/fabric-emu/fabric/tc"
	"github.com/fabric-emu/fabric/tc/delay"
	"github.com/fabric-emu/fabric/tc/tctest"
)

// A one-way delay d on a link adds 2d to a ping's RTT across it: h0 pings
// h1 across a 1 ms link and a 2 ms one, h2 across the same 1 ms link and
// one of 500 µs. Both paths cross the same number of lines and ports, so
// the difference of their fastest RTTs is 2 × (2 ms − 500 µs) = 3 ms, with
// the lab's own latency and each line's fixed cost (the packet's trip
// through the netfilter queue and back, tens of µs on this machine)
// cancelled. The reference line's delay is long enough for its loop to
// have woken before the packet is due (a line of 10 µs releases at the
// loop's wake-up). A release may leave up to delay.BatchTolerance early
// when it shares a wake-up (5 µs a line here), and the fastest of 20 pings
// is late by little: ±100 µs in all, which lines that delay 10 % too long
// (+300 µs) or 10 % too short exceed.
func TestWireDelaysPings(t *testing.T) {
	lab := emutest.Up(t, `name: t11wire
topology:
  kind: custom
  nodes: {h0: {kind: host}, h1: {kind: host}, h2: {kind: host}, s0: {kind: switch}}
  links:
    - {endpoints: [h0:eth0, s0:eth1], delay: 1ms}
    - {endpoints: [h1:eth0, s0:eth2], delay: 2ms}
    - {endpoints: [h2:eth0, s0:eth3], delay: 500us}
links: {rate: 100Mbit}
`)
	fastest := func(to string) time.Duration {
		rtts, err := lab.RTT(context.Background(), "h0", to, 20)
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(rtts)
		t.Logf("h0 → %s: RTT min %v p50 %v max %v", to, rtts[0], rtts[len(rtts)/2], rtts[len(rtts)-1])
		return rtts[0]
	}
	// The fastest of 20 is immune to a stall that delays a few: only lines
	// late at the median, so late that even the fastest ping waited,
	// justify a retry.
	testenv.Retry(t, 2, 0, func(a *testenv.Attempt) {
		st0 := wireStats(t, lab)
		two, one := fastest("h1"), fastest("h2")
		st := wireStats(t, lab).Since(st0)
		a.Logf("released %d, lateness p50 %v p99 %v max %v", st.Released(), st.Lateness(0.5), st.Lateness(0.99), st.MaxLateness())
		if p50 := st.Lateness(0.5); p50 > 50*time.Microsecond {
			a.Stalled("the lines were %v late at the median", p50)
		}
		const want = 2 * (2*time.Millisecond - 500*time.Microsecond)
		if d := two - one - want; d < -100*time.Microsecond || d > 100*time.Microsecond {
			a.Errorf("h1's 2 ms link added %v more than h2's 500 µs link to the RTT, want %v ± 100 µs", two-one, want)
		}
	})
}

// A constant delay never reorders, and loss drops independently with the
// asked probability: 20 000 datagrams at 20 kpps through a direction with
// 2 ms of delay and 10 % loss arrive in order, and the ones the network
// lost number within 4.5 standard deviations of 2000, all of them dropped
// by the line as asked. The switch port's buffer holds all 20 000, so a
// line that the machine held back loses nothing at the port when it
// catches up; datagrams the receiver's socket dropped (a reader starved
// of CPU) were delivered by the network and are counted apart.
func TestWireKeepsOrderAndLosesAsAsked(t *testing.T) {
	lab := emutest.Up(t, `name: t11order
topology:
  kind: custom
  nodes: {h0: {kind: host}, h1: {kind: host}, s0: {kind: switch}}
  links:
    - {endpoints: [h0:eth0, s0:eth1], delay: {up: 2ms}, loss: {up: 0.1}}
    - {endpoints: [h1:eth0, s0:eth2]}
links: {rate: 100Mbit}
ports: {buffer: 4MB}
`)
	sink := tctest.ListenUDP(t, lab, "h1", 9100)
	defer sink.Close()
	bufferDropsBefore := tctest.UDPCounter(t, lab, "h1", "RcvbufErrors")
	const n = 20000
	sent, err := tctest.SendUDP(context.Background(), lab, tctest.UDPStream{From: "h0",
		To: netip.AddrPortFrom(lab.Host("h1").Addr(), 9100), Rate: n * 100 * 8, Size: 100, Duration: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	waitForQuietWire(t, lab, func() int { return len(sink.Received()) + tctest.UDPCounter(t, lab, "h1", "RcvbufErrors") })
	got := sink.Received()
	for i := 1; i < len(got); i++ {
		if got[i].Seq <= got[i-1].Seq {
			t.Fatalf("datagram %d arrived after %d: reordered", got[i].Seq, got[i-1].Seq)
		}
	}
	bufferDrops := tctest.UDPCounter(t, lab, "h1", "RcvbufErrors") - bufferDropsBefore
	lost := sent - len(got) - bufferDrops
	tot := wireStats(t, lab).Totals()
	t.Logf("sent %d, received %d, lost %d in the network (the line dropped %d of %d as asked, %d unasked); the receiver's socket dropped %d",
		sent, len(got), lost, tot.Lost, tot.Packets, tot.Overflow, bufferDrops)
	mean, sd := 0.1*float64(sent), math.Sqrt(float64(sent)*0.1*0.9)
	if math.Abs(float64(lost)-mean) > 4.5*sd {
		t.Errorf("lost %d of %d, want %.0f ± %.0f", lost, sent, mean, 4.5*sd)
	}
	if tot.Overflow != 0 || int(tot.Lost) != lost {
		t.Errorf("the line dropped %d as asked and %d unasked, but %d went missing", tot.Lost, tot.Overflow, lost)
	}
}

// waitForQuietWire waits until the lab's delay lines hold no packet and
// arrived() has stopped growing for 50 ms: every datagram released has
// then reached its receiver or its socket's drop counter. A line that
// still holds packets after 30 s is broken, not slow.
func waitForQuietWire(t *testing.T, lab *emu.Lab, arrived func() int) {
	t.Helper()
	start, last, lastAt := time.Now(), -1, time.Now()
	for {
		st := wireStats(t, lab)
		tot := st.Totals()
		held := int64(tot.Packets) - int64(tot.Lost) - int64(st.Released())
		if n := arrived(); n != last {
			last, lastAt = n, time.Now()
		}
		if held == 0 && time.Since(lastAt) > 50*time.Millisecond {
			t.Logf("the lines emptied %v after the stream; lateness p99 %v, max %v",
				time.Since(start).Round(time.Millisecond), st.Lateness(0.99), st.MaxLateness())
			return
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("the lines still hold %d packets 30 s after the stream", held)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Delay is not buffer: two senders overload a port whose buffer is 20 KB,
// and the share of arrivals the port drops (its own counters) is the same
// with and without 2 ms of delay on every link (Mininet's netem would
// count its limit as buffer), within 4.5 standard deviations of the
// difference of two binomial shares, plus the start: the first 20 KB the
// buffer absorbs before it drops. The network loses nothing beyond the
// port's drops: what the senders' NICs (a stalled dequeue fills them), the
// receiver's socket and the machine's per-CPU input backlogs (which a veth
// feeds, and which no counter of the lab sees) dropped is counted apart.
func TestWireLeavesTheBufferAlone(t *testing.T) {
	type result struct{ arrived, dropped, lostElsewhere, backlog float64 }
	drops := func(name, delay string) result {
		lab := emutest.Up(t, "name: "+name+"\ntopology: {kind: star, hosts: 3}\nlinks: {rate: 10Mbit"+delay+"}\nports: {buffer: 20KB}\n")
		sink := tctest.ListenUDP(t, lab, "h0", 9101)
		defer sink.Close()
		var toH0 string
		for _, i := range lab.Graph.Node("s0").Ifaces {
			if i.Peer.Node.Name == "h0" {
				toH0 = i.Name
			}
		}
		port, err := lab.PortTarget("s0", toH0)
		if err != nil {
			t.Fatal(err)
		}
		nicDrops := func() (n uint64) {
			for _, h := range []string{"h1", "h2"} {
				nic, err := lab.PortTarget(h, lab.Graph.Node(h).Ifaces[0].Name)
				if err != nil {
					t.Fatal(err)
				}
				n += portStats(t, nic).Drops
			}
			return n
		}
		before, sockBefore, nicBefore, backlogBefore := portStats(t, port), tctest.UDPCounter(t, lab, "h0", "RcvbufErrors"), nicDrops(), backlogDrops(t)
		var wg sync.WaitGroup
		var sent atomic.Int64
		for _, h := range []string{"h1", "h2"} {
			wg.Go(func() {
				n, err := tctest.SendUDP(context.Background(), lab, tctest.UDPStream{From: h,
					To: netip.AddrPortFrom(lab.Host("h0").Addr(), 9101), Rate: 7.5e6, Size: 1500, Duration: 3 * time.Second, Smooth: true})
				if err != nil {
					t.Error(err)
				}
				sent.Add(int64(n))
			})
		}
		wg.Wait()
		if lab.DelayLoop() != nil {
			waitForQuietWire(t, lab, func() int { return len(sink.Received()) + tctest.UDPCounter(t, lab, "h0", "RcvbufErrors") })
		} else {
			time.Sleep(100 * time.Millisecond)
		}
		after := portStats(t, port)
		sock := tctest.UDPCounter(t, lab, "h0", "RcvbufErrors") - sockBefore
		r := result{arrived: float64(after.Packets - before.Packets + after.Drops - before.Drops), dropped: float64(after.Drops - before.Drops)}
		nic := float64(nicDrops() - nicBefore)
		r.lostElsewhere = float64(sent.Load()) - float64(len(sink.Received())) - float64(sock) - r.dropped - nic
		r.backlog = float64(backlogDrops(t) - backlogBefore)
		t.Logf("delay%q: sent %d, the senders' NICs dropped %.0f, the port dropped %.0f of %.0f (%.3f), the receiver's socket %d, the machine's input backlogs %.0f, received %d",
			delay, sent.Load(), nic, r.dropped, r.arrived, r.dropped/r.arrived, sock, r.backlog, len(sink.Received()))
		return r
	}
	plain, delayed := drops("t11buf0", ""), drops("t11buf2", ", delay: 2ms")
	for _, r := range []result{plain, delayed} {
		if r.lostElsewhere < 0 || r.lostElsewhere > r.backlog {
			t.Errorf("%.0f datagrams lost outside the port, of which the machine's input backlogs can hold %.0f", r.lostElsewhere, r.backlog)
		}
	}
	p0, p1 := plain.dropped/plain.arrived, delayed.dropped/delayed.arrived
	p := (plain.dropped + delayed.dropped) / (plain.arrived + delayed.arrived)
	sd := math.Sqrt(p * (1 - p) * (1/plain.arrived + 1/delayed.arrived))
	start := 20e3 / 1514 / min(plain.arrived, delayed.arrived)
	if math.Abs(p0-p1) > 4.5*sd+start || p0 < 0.2 {
		t.Errorf("the port dropped %.3f of arrivals without delay and %.3f with 2 ms (allowed %.3f): the delay changed the buffer", p0, p1, 4.5*sd+start)
	}
}

func portStats(t *testing.T, port tc.Target) tc.PortStats {
	t.Helper()
	st, err := tc.Stats(context.Background(), port)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// A lab file asking for delay on a kernel that cannot run delay lines
// fails before anything is made, at the line of the first such setting.
func TestWireRefusedWithoutTheMechanism(t *testing.T) {
	testenv.RequireRoot(t)
	defer emu.SetDelayAvailable(func() error { return errors.New("no netfilter queue here") })()
	s, err := emu.Parse("nodelay.yaml", []byte("name: t11nodelay\ntopology: {kind: star, hosts: 2}\nlinks:\n  rate: 100Mbit\n  host: {delay: 1ms}\n"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = emu.Up(context.Background(), s)
	if err == nil || !strings.Contains(err.Error(), "nodelay.yaml:5: links.host.delay: link delay and loss need delay lines") {
		t.Fatalf("Up = %v, want nodelay.yaml:5: links.host.delay: …", err)
	}
	emutest.NothingLeft(t, s.Name)
}

// A lab at rest costs nothing: with no packet held, the delay loop blocks
// in the kernel until one arrives or Stop is called. Over an idle second
// it may wake only for the packets that cross its lines: each one wakes
// it on arrival and at most delay/poll + 1 times until its release (poll:
// half the shortest delay), so 4 turns per packet, and none otherwise.
func TestWireRestsWhenIdle(t *testing.T) {
	lab := emutest.Up(t, "name: t11idle\ntopology: {kind: star, hosts: 2}\nlinks: {delay: 1ms}\n")
	w := lab.DelayLoop()
	time.Sleep(200 * time.Millisecond) // let the lab's own start-up traffic pass
	st0, use0 := wireStats(t, lab), loopUse(t, w)
	time.Sleep(time.Second)
	use := loopUse(t, w).Since(use0)
	turns, cpu := use.Turns, use.CPU
	packets := wireStats(t, lab).Since(st0).Totals().Packets
	t.Logf("idle second: %d turns for %d packets, %v of loop CPU", turns, packets, cpu)
	if turns > 4*packets {
		t.Errorf("the idle loop woke %d times in a second for %d packets, want at most 4 per packet", turns, packets)
	}
}

func wireStats(t *testing.T, lab *emu.Lab) delay.Stats {
	t.Helper()
	st, err := lab.DelayLoop().Stats()
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func loopUse(t *testing.T, w *delay.Loop) delay.Use {
	t.Helper()
	u, err := w.Use()
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// backlogDrops is snmp.BacklogDrops, fatal on error.
func backlogDrops(t *testing.T) uint64 {
	t.Helper()
	n, err := snmp.BacklogDrops()
	if err != nil {
		t.Fatal(err)
	}
	return n
}
