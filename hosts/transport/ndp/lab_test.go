package ndp

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fabric-emu/fabric/emu"
	"github.com/fabric-emu/fabric/hosts/transport"
	"github.com/fabric-emu/fabric/internal/testenv"
	"github.com/fabric-emu/fabric/tc"
)

// The lab tests run NDP in a real lab whose switch ports are NDP ports:
// one endpoint per host, opened inside the host's namespace as `fabric
// transport ndp` opens it, in this process so that the test sees what
// every receiver's application gets.

// labRun is one scenario: a star of hosts around switch s0, or topology.
type labRun struct {
	name     string // unique per scenario; the test process's id is added
	hosts    int
	topology string // the lab's topology: settings; "" for the star
	// inspect, when set, reads the lab when the schedule ends, before it
	// goes down.
	inspect func(lab *emu.Lab)
	links   string // the lab's links: settings
	args    string // the scheme's args (FABRIC_ARGS)
	// msgs is the schedule, given every host's address.
	msgs  func(addr map[string]netip.Addr) []transport.Message
	limit time.Duration // how long the messages may take
}

// labResult is what a scenario delivered and measured.
type labResult struct {
	sched   []transport.Message
	set     *transport.Set
	dl      *delivery
	port    tc.PortStats // s0's port to h0, when the schedule ends
	stats   Stats        // summed over the hosts
	packets int64        // through every endpoint's sockets
	cpu     time.Duration
	elapsed time.Duration // from the schedule's start to the last delivery
	rtt     time.Duration
	wire    string // the delay lines' lateness, if the links have delay
}

// runLab builds the lab, runs the schedule to its last delivery (or the
// limit), reads s0's port to h0 and takes the lab down.
func runLab(t testing.TB, r labRun) labResult {
	t.Helper()
	ctx := context.Background()
	name := fmt.Sprintf("tn%d%s", os.Getpid()%100000, r.name)
	topology := r.topology
	if topology == "" {
		topology = fmt.Sprintf("{kind: star, hosts: %d}", r.hosts)
	}
	spec, err := emu.Parse(name+".yaml", fmt.Appendf(nil, "name: %s\ntopology: %s\nlinks: {%s}\nports: {ndp: {}}\n", name, topology, r.links))
	if err != nil {
		t.Fatal(err)
	}
	lab, err := emu.Up(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	// Down when this scenario ends: a lab left up keeps its delay lines
	// on the CPU the next scenario uses.
	defer func() {
		if err := lab.Down(context.Background()); err != nil {
			t.Errorf("lab %s down: %v", name, err)
		}
	}()
	rtts, err := lab.RTT(ctx, "h1", "h0", 5)
	if err != nil || len(rtts) == 0 {
		t.Fatalf("RTT h1→h0: %v (%d echoes)", err, len(rtts))
	}
	// The lowest of 5 echoes, as experiments measure the RTT the
	// contract tells transports (experiments/rtt.go).
	res := labResult{rtt: slices.Min(rtts), dl: &delivery{next: map[uint64]int64{}}}
	var peers []transport.Peer
	addr := map[string]netip.Addr{}
	for _, n := range lab.Graph.Hosts() {
		peers = append(peers, transport.Peer{Name: n.Name, Addr: n.Addr})
		addr[n.Name] = n.Addr
	}
	res.sched = r.msgs(addr)
	procs := openAll(t, lab, peers, res.sched, r, &res)
	res.run(t, procs, r.limit)
	if w := lab.Wire(); w != nil {
		if st, err := w.Stats(); err == nil {
			res.wire = fmt.Sprintf("delay lines: %d packets released, lateness p50 %v p99 %v max %v",
				st.Released(), st.Lateness(0.5), st.Lateness(0.99), st.MaxLateness())
		}
	}
	if r.inspect != nil {
		r.inspect(lab)
	}
	if r.topology != "" {
		return res
	}
	target, err := lab.PortTarget("s0", toward(lab, "h0"))
	if err != nil {
		t.Fatal(err)
	}
	if res.port, err = tc.Stats(ctx, target); err != nil {
		t.Fatal(err)
	}
	return res
}

// toward is the interface of s0 whose link leads to host.
func toward(lab *emu.Lab, host string) string {
	for _, i := range lab.Graph.Node("s0").Ifaces {
		if i.Peer.Node.Name == host {
			return i.Name
		}
	}
	return ""
}

// openAll writes every host's schedule and opens its endpoint in its
// namespace; the schedule starts 300 ms later.
func openAll(t testing.TB, lab *emu.Lab, peers []transport.Peer, sched []transport.Message, r labRun, res *labResult) []*proc {
	t.Helper()
	dir := t.TempDir()
	start := time.Now().Add(300 * time.Millisecond).UnixNano()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var procs []*proc
	for _, p := range peers {
		var mine []transport.Message
		for _, m := range sched {
			if m.Src == p.Name || m.Dst == p.Name {
				mine = append(mine, m)
			}
		}
		env := &transport.Env{Contract: transport.Version, Host: p.Name, Addr: p.Addr, Peers: peers,
			Schedule: filepath.Join(dir, transport.ScheduleFileName(p.Name)), Records: filepath.Join(dir, transport.FileName(p.Name)),
			StartNS: start, LinkRate: 100e6, MTU: 1500, RTT: res.rtt, Args: []byte(r.args)}
		if err := transport.WriteScheduleFile(env.Schedule, mine); err != nil {
			t.Fatal(err)
		}
		var pr *proc
		err := lab.Do(p.Name, func() error {
			var err error
			pr, err = open(context.Background(), env, log, res.dl.deliver)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		procs = append(procs, pr)
	}
	return procs
}

// run sends the schedule, waits for the receivers to deliver every message
// (or the limit), stops the endpoints and reads their records and stats.
func (res *labResult) run(t testing.TB, procs []*proc, limit time.Duration) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	cpu0 := cpuTime()
	for _, p := range procs {
		wg.Go(func() {
			if err := p.run(ctx, io.Discard); err != nil {
				t.Error(err)
			}
		})
	}
	start := time.Unix(0, procs[0].e.env.StartNS)
	deadline := start.Add(limit)
	for time.Now().Before(deadline) && res.delivered(procs) < int64(len(res.sched)) {
		time.Sleep(5 * time.Millisecond)
	}
	res.elapsed = time.Since(start)
	res.cpu = cpuTime() - cpu0
	cancel()
	wg.Wait()
	for _, p := range procs {
		res.stats.add(p.e.stats)
		res.packets += p.e.pktsIn.Load() + p.e.pktsOut.Load()
	}
	set, err := transport.ReadDir(filepath.Dir(procs[0].e.env.Records))
	if err != nil {
		t.Fatal(err)
	}
	res.set = set
}

func (res *labResult) delivered(procs []*proc) int64 {
	var n int64
	for _, p := range procs {
		p.e.mu.Lock()
		n += p.e.stats.Delivered
		p.e.mu.Unlock()
	}
	return n
}

// check fails t unless every message was delivered to its application
// exactly once, in order and byte for byte, and recorded exactly once.
func (res *labResult) check(t testing.TB) {
	t.Helper()
	checkRecords(t, res.sched, res.set)
	res.dl.mu.Lock()
	defer res.dl.mu.Unlock()
	for _, err := range res.dl.errs {
		t.Error(err)
	}
	for _, m := range res.sched {
		if res.dl.next[m.ID] != m.Size {
			t.Errorf("message %d (%s→%s): %d of %d bytes delivered", m.ID, m.Src, m.Dst, res.dl.next[m.ID], m.Size)
		}
	}
}

// incast is 3 senders each sending one message of every size from 1 B to
// 1 MB to h0 at the same instant, then again 100 ms later.
func incast(addr map[string]netip.Addr) []transport.Message {
	var out []transport.Message
	id := uint64(1)
	for _, at := range []int64{0, 100e6} {
		for _, size := range []int64{1, 1000, 1452, 1453, 20000, 200000, 1 << 20} {
			for _, src := range []string{"h1", "h2", "h3"} {
				out = append(out, transport.Message{ID: id, TimeNS: at, Src: src, SrcAddr: addr[src], Dst: "h0", DstAddr: addr["h0"],
					Size: size, Pattern: "incast"})
				id++
			}
		}
	}
	return out
}

// Three senders to one receiver through a star of NDP ports: their first
// windows overflow the receiver's 8-packet data queue, which trims; every
// message is still delivered exactly once and in order. With 1 % of the
// packets lost on every link (DATA, headers, ACKs, NACKs and PULLs alike),
// the RTO recovers what trimming cannot.
func TestLabIncastDeliversOnce(t *testing.T) {
	testenv.RequireRoot(t)
	for _, sc := range []struct{ name, links string }{
		{"i", "rate: 100Mbit, delay: {down: 250us}"},
		{"l", "rate: 100Mbit, delay: {down: 250us}, loss: 0.01"},
	} {
		t.Run(sc.name, func(t *testing.T) {
			res := runLab(t, labRun{name: sc.name, hosts: 4, links: sc.links, msgs: incast, limit: 20 * time.Second})
			t.Logf("%d messages in %v (RTT %v); endpoints %+v; port s0→h0: %+v; %s", len(res.sched), res.elapsed.Round(time.Millisecond), res.rtt, res.stats, *res.port.NDP, res.wire)
			res.check(t)
			if res.port.NDP == nil || res.port.NDP.Trimmed == 0 || res.stats.Trims == 0 || res.stats.Nacks == 0 {
				t.Errorf("no trimming: the incast did not overflow the data queue (port %+v, endpoints %+v)", res.port.NDP, res.stats)
			}
			if sc.name == "l" && res.stats.RTOs == 0 {
				t.Errorf("1 %% loss and no RTO: loss recovery was not exercised")
			}
		})
	}
}

// add sums o into s, field by field.
func (s *Stats) add(o Stats) {
	a, b := reflect.ValueOf(s).Elem(), reflect.ValueOf(o)
	for i := range a.NumField() {
		a.Field(i).SetInt(a.Field(i).Int() + b.Field(i).Int())
	}
}
