package emu_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/fabric-emu/fabric/emu"
	"github.com/fabric-emu/fabric/emu/emutest"
	"github.com/fabric-emu/fabric/internal/netnsutil"
	"github.com/fabric-emu/fabric/internal/testenv"
)

func TestFatTreeK4PingAllAndECMP(t *testing.T) {
	lab := emutest.Up(t, "name: t-emu-k4\ntopology: {kind: fattree, k: 4}\n")
	res, err := lab.PingAll(context.Background(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if res.Sent != 16*15 || res.Received != res.Sent {
		t.Fatalf("pingall: %d/%d received; lost %v", res.Received, res.Sent, res.Lost())
	}

	// Neighbours are permanent entries with the generated MACs, so the
	// machine-wide ARP table never fills, however many labs run.
	err = lab.Do("h0", func() error {
		l, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		neighs, err := netlink.NeighList(l.Attrs().Index, netlink.FAMILY_V4)
		if err != nil {
			return err
		}
		want := lab.Graph.Node("h0").Ifaces[0].Peer.MAC().String()
		if len(neighs) != 1 || neighs[0].State != netlink.NUD_PERMANENT || neighs[0].HardwareAddr.String() != want {
			return fmt.Errorf("h0 neighbours %+v, want one permanent entry for %s", neighs, want)
		}
		if segs := l.Attrs().GSOMaxSegs; segs != 1 {
			return fmt.Errorf("h0:eth0 gso_max_segs %d, want 1", segs)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// The kernel holds the multipath routes the graph computed: an edge
	// switch reaches another pod over both aggregation switches.
	err = lab.Do("p0e0", func() error {
		_, dst, _ := net.ParseCIDR("10.2.0.0/24")
		routes, err := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Dst: dst}, netlink.RT_FILTER_DST)
		if err != nil {
			return err
		}
		if len(routes) != 1 || len(routes[0].MultiPath) != 2 {
			return fmt.Errorf("p0e0 → 10.2.0.0/24: %+v, want one route with 2 next hops", routes)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// 32 UDP flows from pod 0 to pod 2 (different source ports): with L4
	// hashing and a hash seed per switch they reach at least 3 of the 4
	// core switches (all 32 on 2 or fewer cores by chance: 6·2⁻³² ≈ 1e-9).
	// With one seed for every switch (ECMP polarization) a flow's choice at
	// the aggregation layer repeats its choice at the edge, and at most 2
	// cores are ever used.
	const flows = 32
	before := coreTx(t, lab)
	dst := lab.Graph.Node("h8").Addr
	var sink net.PacketConn
	if err := lab.Do("h8", func() (err error) { sink, err = net.ListenPacket("udp4", dst.String()+":9000"); return }); err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	for range flows {
		var c net.Conn
		err := lab.Do("h0", func() (err error) { c, err = net.Dial("udp4", dst.String()+":9000"); return })
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 50; i++ {
			c.Write(make([]byte, 200))
		}
		c.Close()
	}
	time.Sleep(200 * time.Millisecond)
	after := coreTx(t, lab)
	used := 0
	for core, n := range after {
		if n-before[core] >= 40 { // a flow's 50 packets, less ARP and slack
			used++
		}
	}
	if used < 3 {
		t.Fatalf("%d flows used %d core switches (tx packets before %v after %v), want ≥ 3", flows, used, before, after)
	}
	t.Logf("%d flows spread over %d of 4 core switches", flows, used)
}

// coreTx sums transmitted packets over each core switch's interfaces.
func coreTx(t *testing.T, lab *emu.Lab) map[string]uint64 {
	out := map[string]uint64{}
	for _, n := range lab.Graph.Switches() {
		if n.Tier != "core" {
			continue
		}
		err := lab.Do(n.Name, func() error {
			for _, i := range n.Ifaces {
				l, err := netlink.LinkByName(i.Name)
				if err != nil {
					return err
				}
				out[n.Name] += l.Attrs().Statistics.TxPackets
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func TestTwoLabsCoexistAndNamesAreExclusive(t *testing.T) {
	a := emutest.Up(t, "name: t-emu-a\ntopology: {kind: star, hosts: 3}\n")
	b := emutest.Up(t, "name: t-emu-b\ntopology: {kind: dumbbell, left: 2, right: 2}\n")
	for _, lab := range []*emu.Lab{a, b} {
		res, err := lab.PingAll(context.Background(), time.Second)
		if err != nil || res.Received != res.Sent {
			t.Fatalf("%s: %v, %d/%d", lab.Name, err, res.Received, res.Sent)
		}
	}
	s, _ := emu.Parse("again.yaml", []byte("name: t-emu-a\ntopology: {kind: star, hosts: 2}\n"))
	if _, err := emu.Up(context.Background(), s); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("second up of t-emu-a: %v", err)
	}
	// The failed up must not have touched the running lab.
	if res, err := a.PingAll(context.Background(), time.Second); err != nil || res.Received != res.Sent {
		t.Fatalf("t-emu-a after a refused up: %v", err)
	}
}

// A failure part-way (here a host sysctl the kernel does not have) rolls
// back everything made so far.
func TestFailedUpRollsBack(t *testing.T) {
	testenv.RequireRoot(t)
	s, err := emu.Parse("rb.yaml", []byte("name: t-emu-rb\ntopology: {kind: star, hosts: 4}\nhosts:\n  sysctls: {net.ipv4.no_such_knob: 1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = emu.Up(context.Background(), s)
	if err == nil || !strings.Contains(err.Error(), "no_such_knob") {
		t.Fatalf("up: %v", err)
	}
	emutest.NothingLeft(t, "t-emu-rb")
}

// Killing `fabric up` with SIGKILL half-way and then running `fabric down`
// leaves nothing. CI sets FABRIC_TEST_DOWN_ALL=1 to exercise
// `down --all`; developers' machines may run other labs, so by default the
// test removes its own lab by name (the same prefix scan, without state).
func TestCrashRecovery(t *testing.T) {
	testenv.RequireRoot(t)
	bin := filepath.Join(t.TempDir(), "fabric")
	build := exec.Command("go", "build", "-o", bin, "github.com/fabric-emu/fabric/cmd/fabric")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	const lab = "t-emu-crash"
	file := filepath.Join(t.TempDir(), "crash.yaml")
	os.WriteFile(file, []byte("name: "+lab+"\ntopology: {kind: fattree, k: 8}\n"), 0o644)
	up := exec.Command(bin, "up", file)
	if err := up.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		ns, _ := netnsutil.LabPaths(lab)
		if len(ns) >= 40 || time.Now().After(deadline) {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	up.Process.Signal(syscall.SIGKILL)
	up.Wait()
	ns, _ := netnsutil.LabPaths(lab)
	t.Logf("killed up with %d namespaces made", len(ns))
	if len(ns) == 0 {
		t.Fatal("up made no namespaces before it was killed")
	}
	args := []string{"down", lab}
	if os.Getenv("FABRIC_TEST_DOWN_ALL") == "1" {
		args = []string{"down", "--all"}
	}
	if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
		t.Fatalf("fabric %v: %v\n%s", args, err, out)
	}
	emutest.NothingLeft(t, lab)
}

// hosts.cc: dctcp makes DCTCP every host's default, registering fabric's
// BPF DCTCP when the kernel has none, and Down takes the registration away.
func TestLabCongestionControl(t *testing.T) {
	testenv.RequireRoot(t)
	before, _ := os.ReadFile("/proc/sys/net/ipv4/tcp_available_congestion_control")
	lab := emutest.Up(t, "name: t-emu-cc\ntopology: {kind: star, hosts: 2}\nhosts: {cc: dctcp}\n")
	err := lab.Do("h0", func() error {
		got, err := os.ReadFile("/proc/sys/net/ipv4/tcp_congestion_control")
		if err != nil || strings.TrimSpace(string(got)) != "dctcp" {
			return fmt.Errorf("h0 default cc %q (%v), want dctcp", got, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := lab.Down(context.Background()); err != nil {
		t.Fatal(err)
	}
	after, _ := os.ReadFile("/proc/sys/net/ipv4/tcp_available_congestion_control")
	if !strings.Contains(string(before), "dctcp") && strings.Contains(string(after), "dctcp") {
		t.Fatalf("dctcp still registered after down: %s", after)
	}
}

// hosts.rto_min and hosts.quickack reach the hosts' default routes, the
// rto_min locked (the kernel ignores an unlocked one).
func TestHostRouteTimers(t *testing.T) {
	lab := emutest.Up(t, "name: t11timers\ntopology: {kind: star, hosts: 2}\nhosts: {rto_min: 10ms, quickack: true}\n")
	var routes []netlink.Route
	err := lab.Host("h0").Do(func() error {
		var err error
		routes, err = netlink.RouteList(nil, netlink.FAMILY_V4)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range routes {
		if r.Dst == nil || r.Dst.IP.IsUnspecified() {
			if r.RtoMin != 10 || !r.RtoMinLock || r.QuickACK != 1 {
				t.Fatalf("default route %+v: want rto_min lock 10ms and quickack 1", r)
			}
			return
		}
	}
	t.Fatalf("no default route among %v", routes)
}
