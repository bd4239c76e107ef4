package emu

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func mustResolve(t *testing.T, src string) *Graph {
	t.Helper()
	s, err := Parse("t.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	g, err := s.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestFatTreeCountsAndAddressing(t *testing.T) {
	for _, k := range []int{4, 6, 8} {
		t.Run(fmt.Sprintf("k=%d", k), func(t *testing.T) {
			g := mustResolve(t, fmt.Sprintf("name: ft\ntopology: {kind: fattree, k: %d}\n", k))
			half := k / 2
			count := map[string]int{}
			for _, n := range g.Nodes {
				count[n.Tier]++
			}
			want := map[string]int{"host": k * k * k / 4, "edge": k * half, "agg": k * half, "core": half * half}
			for tier, n := range want {
				if count[tier] != n {
					t.Errorf("%s: %d nodes, want %d", tier, count[tier], n)
				}
			}
			// host–edge, edge–agg, agg–core: k³/4 links each.
			if len(g.Links) != 3*k*k*k/4 {
				t.Errorf("%d links, want %d", len(g.Links), 3*k*k*k/4)
			}
			for _, n := range g.Nodes {
				wantIfs := k
				if n.Kind == HostNode {
					wantIfs = 1
				}
				if len(n.Ifaces) != wantIfs {
					t.Errorf("%s has %d interfaces, want %d", n.Name, len(n.Ifaces), wantIfs)
				}
				for i, ifc := range n.Ifaces {
					if ifc.Name != fmt.Sprintf("eth%d", i) {
						t.Errorf("%s: interface %d is %s", n.Name, i, ifc.Name)
					}
				}
			}
			// Al-Fares addressing: host i of edge e in pod p is 10.p.e.(i+2).
			for n, h := range g.Hosts() {
				p, e, i := n/(half*half), (n/half)%half, n%half
				want := netip.AddrFrom4([4]byte{10, byte(p), byte(e), byte(i + 2)})
				if h.Addr != want || h.Gateway != netip.AddrFrom4([4]byte{10, byte(p), byte(e), 1}) {
					t.Errorf("%s: %s gw %s, want %s", h.Name, h.Addr, h.Gateway, want)
				}
				if edge := h.Ifaces[0].Peer.Node.Name; edge != fmt.Sprintf("p%de%d", p, e) {
					t.Errorf("%s attached to %s", h.Name, edge)
				}
			}
			// Every switch routes every edge subnet but its own; routes to
			// other pods are multipath over k/2 next hops at edge and agg.
			for _, sw := range g.Switches() {
				wantRoutes := k * half
				if sw.Tier == "edge" {
					wantRoutes--
				}
				if len(sw.Routes) != wantRoutes {
					t.Errorf("%s: %d routes, want %d", sw.Name, len(sw.Routes), wantRoutes)
				}
				for _, r := range sw.Routes {
					pod := int(r.Dst.Addr().As4()[1])
					own := sw.Tier != "core" && strings.HasPrefix(sw.Name, fmt.Sprintf("p%d", pod))
					switch {
					case sw.Tier == "edge", sw.Tier == "agg" && !own:
						if len(r.NextHops) != half {
							t.Errorf("%s → %s: %d next hops, want %d", sw.Name, r.Dst, len(r.NextHops), half)
						}
					default:
						if len(r.NextHops) != 1 {
							t.Errorf("%s → %s: %d next hops, want 1", sw.Name, r.Dst, len(r.NextHops))
						}
					}
				}
			}
		})
	}
}

func TestOtherGenerators(t *testing.T) {
	cases := []struct {
		src                    string
		hosts, switches, links int
	}{
		{"name: ls\ntopology: {kind: leafspine, leaves: 4, spines: 2, hosts_per_leaf: 3}\n", 12, 6, 12 + 8},
		{"name: st\ntopology: {kind: star, hosts: 10}\n", 10, 1, 10},
		{"name: db\ntopology: {kind: dumbbell, left: 2, right: 3}\n", 5, 2, 6},
		{"name: cu\ntopology:\n  kind: custom\n  nodes: {a: {kind: host}, b: {kind: host, address: 10.9.0.5/24}, s: {kind: switch, tier: tor}}\n  links:\n    - endpoints: [a:eth0, s:port1]\n    - endpoints: [b:eth0, s:port2]\n      rate: 10Mbit\n", 2, 1, 2},
	}
	for _, c := range cases {
		g := mustResolve(t, c.src)
		if len(g.Hosts()) != c.hosts || len(g.Switches()) != c.switches || len(g.Links) != c.links {
			t.Errorf("%q: %d hosts %d switches %d links", c.src, len(g.Hosts()), len(g.Switches()), len(g.Links))
		}
	}
	star := mustResolve(t, cases[1].src)
	if i := star.Node("h5").Ifaces[0].Peer; i.Label() != "s0:eth5" {
		t.Errorf("star: h5 is on %s, want s0:eth5", i.Label())
	}
	cu := mustResolve(t, cases[3].src)
	if b := cu.Node("b"); b.Addr.String() != "10.9.0.5" || b.Gateway.String() != "10.9.0.1" || b.Ifaces[0].Link.Rate.String() != "10Mbit" {
		t.Errorf("custom host b: %s gw %s rate %s", b.Addr, b.Gateway, b.Ifaces[0].Link.Rate)
	}
	db := mustResolve(t, cases[2].src)
	if r := db.Node("s0").Routes; len(r) != 1 || r[0].NextHops[0].Peer.Node.Name != "s1" {
		t.Errorf("dumbbell s0 routes: %+v", r)
	}
}

func TestLinkDefaultsPrecedence(t *testing.T) {
	g := mustResolve(t, "name: p\ntopology: {kind: dumbbell, left: 1, right: 1}\nlinks:\n  rate: 1Gbit\n  mtu: 9000\n  fabric: {rate: 10 Gbps}\n")
	for _, l := range g.Links {
		want := "1Gbit"
		if l.Class == FabricLink {
			want = "10Gbit"
		}
		if l.Rate.String() != want || l.MTU != 9000 || l.Offloads {
			t.Errorf("link %s: rate %s mtu %d offloads %v, want %s 9000 false", l.A.Label(), l.Rate, l.MTU, l.Offloads, want)
		}
	}
}

// TestBadInput: every mistake is one line naming file:line and field, and
// is found by Load before anything could be built.
func TestBadInput(t *testing.T) {
	cases := []struct{ name, src, want string }{
		{"malformed yaml", "name: a\ntopology: {kind: star\n", "bad.yaml:"},
		{"odd k", "name: a\ntopology:\n  kind: fattree\n  k: 5\n", "bad.yaml:4: topology.k: must be even"},
		{"small k", "name: a\ntopology:\n  kind: fattree\n  k: 2\n", "bad.yaml:4: topology.k: must be even and ≥ 4"},
		{"missing k", "name: a\ntopology:\n  kind: fattree\n", "bad.yaml:2: topology.k: is required"},
		{"bad rate", "name: a\ntopology: {kind: star, hosts: 2}\nlinks:\n  rate: fast\n", "bad.yaml:4: links.rate: rate \"fast\""},
		{"byte rate", "name: a\ntopology: {kind: star, hosts: 2}\nlinks:\n  rate: 10MBps\n", "bad.yaml:4: links.rate:"},
		{"unknown key", "name: a\ntopology: {kind: star, hosts: 2}\nlinkz: {}\n", "bad.yaml:3: linkz: unknown key"},
		{"unknown kind", "name: a\ntopology:\n  kind: torus\n", "bad.yaml:3: topology.kind: unknown kind \"torus\""},
		{"duplicate node", "name: a\ntopology:\n  kind: custom\n  nodes:\n    h1: {kind: host}\n    h1: {kind: switch}\n", "bad.yaml:6:"},
		{"missing node", "name: a\ntopology:\n  kind: custom\n  nodes: {h1: {kind: host}, s1: {kind: switch}}\n  links:\n    - endpoints: [h1:eth0, s2:eth0]\n", "bad.yaml:6: topology.links[0].endpoints[1]: no node \"s2\""},
		{"long ifname", "name: a\ntopology:\n  kind: custom\n  nodes: {h1: {kind: host}, s1: {kind: switch}}\n  links:\n    - endpoints: [h1:eth0, s1:averyveryverylongname]\n", "bad.yaml:6: topology.links[0].endpoints[1]: interface name \"averyveryverylongname\" is 21 characters"},
		{"no name", "topology: {kind: star, hosts: 2}\n", "bad.yaml:1: name: is required"},
		{"bad name", "name: My.Lab\ntopology: {kind: star, hosts: 2}\n", "bad.yaml:1: name:"},
		{"host two links", "name: a\ntopology:\n  kind: custom\n  nodes: {h1: {kind: host}, s1: {kind: switch}, s2: {kind: switch}}\n  links:\n    - endpoints: [h1:eth0, s1:eth0]\n    - endpoints: [h1:eth1, s2:eth0]\n", "bad.yaml:4: topology.nodes.h1: host h1 has 2 links"},
		{"iface reused", "name: a\ntopology:\n  kind: custom\n  nodes: {h1: {kind: host}, h2: {kind: host}, s1: {kind: switch}}\n  links:\n    - endpoints: [h1:eth0, s1:eth0]\n    - endpoints: [h2:eth0, s1:eth0]\n", "bad.yaml:7: topology.links[1].endpoints[1]: s1:eth0 is used by two links"},
		{"duplicate address", "name: a\ntopology:\n  kind: custom\n  nodes: {h1: {kind: host, address: 10.9.0.2/24}, h2: {kind: host, address: 10.9.0.2/24}, s1: {kind: switch}}\n  links:\n    - endpoints: [h1:eth0, s1:eth0]\n    - endpoints: [h2:eth0, s1:eth1]\n", "bad.yaml:4: topology.nodes.h2.address: 10.9.0.2 is also the address of h1"},
		{"bad mtu", "name: a\ntopology: {kind: star, hosts: 2}\nlinks: {mtu: 100}\n", "bad.yaml:3: links.mtu: 100 is out of range"},
		{"unknown runtime", "name: a\ntopology: {kind: star, hosts: 2}\nhosts: {runtime: vm}\n", "bad.yaml:3: hosts.runtime: unknown host runtime \"vm\""},
		{"bad sysctl", "name: a\ntopology: {kind: star, hosts: 2}\nhosts:\n  sysctls: {kernel.panic: 1}\n", "bad.yaml:4: hosts.sysctls.kernel.panic: not a namespaced network sysctl"},
		{"unknown cc", "name: a\ntopology: {kind: star, hosts: 2}\nhosts:\n  cc: vegas\n", "bad.yaml:4: hosts.cc: unknown congestion control \"vegas\""},
		{"k not int", "name: a\ntopology:\n  kind: fattree\n  k: four\n", "bad.yaml:4: topology.k: want an integer, got \"four\""},
		{"pacer eta", "name: a\ntopology: {kind: star, hosts: 2}\nhosts:\n  pacer:\n    eta: 2\n", "bad.yaml:5: hosts.pacer.eta: must be in (0, 1], got 2"},
		{"pacer unknown key", "name: a\ntopology: {kind: star, hosts: 2}\nhosts:\n  pacer: {etta: 0.5}\n", "bad.yaml:4: hosts.pacer.etta: unknown key"},
		{"pacer interval", "name: a\ntopology: {kind: star, hosts: 2}\nhosts:\n  overrides:\n    h1:\n      pacer: {rate_interval: 64us}\n", "bad.yaml:6: hosts.overrides.h1.pacer.rate_interval: 64µs is shorter than a userspace loop can keep"},
		{"override unknown host", "name: a\ntopology: {kind: star, hosts: 2}\nhosts:\n  overrides:\n    h9: {pacer: {}}\n", "bad.yaml:5: hosts.overrides.h9: no host \"h9\""},
		{"override a switch", "name: a\ntopology: {kind: star, hosts: 2}\nhosts:\n  overrides:\n    s0: {pacer: {}}\n", "bad.yaml:5: hosts.overrides.s0: no host \"s0\""},
		{"pacer min above line", "name: a\ntopology: {kind: star, hosts: 2}\nlinks: {rate: 10Mbit}\nhosts:\n  pacer: {min_rate: 20Mbit}\n", "bad.yaml:5: hosts.pacer.min_rate: host h0: 20Mbit is above line_rate 10Mbit"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("bad.yaml", []byte(c.src))
			if err == nil {
				t.Fatal("accepted")
			}
			if msg := err.Error(); !strings.HasPrefix(msg, c.want) || strings.Contains(msg, "\n") {
				t.Fatalf("error %q, want one line starting %q", msg, c.want)
			}
		})
	}
}

// FuzzLoad: whatever the bytes, Parse returns a spec or an error naming
// the file, and never panics.
func FuzzLoad(f *testing.F) {
	f.Add([]byte("name: ft\ntopology: {kind: fattree, k: 4}\n"))
	f.Add([]byte("name: a\ntopology:\n  kind: custom\n  nodes: {h1: {kind: host}, s1: {kind: switch}}\n  links:\n    - endpoints: [h1:eth0, s1:eth0]\n"))
	f.Add([]byte("name: d\ntopology: {kind: dumbbell, left: 1, right: 2}\nlinks: {rate: 1Gbit, host: {mtu: 9000}}\n"))
	f.Add([]byte("name: l\ntopology: {kind: leafspine, leaves: 2, spines: 2, hosts_per_leaf: 2}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Parse("f.yaml", data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "f.yaml") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		if _, err := s.Resolve(); err != nil {
			t.Fatalf("validated spec fails to resolve: %v", err)
		}
	})
}

// Every shipped example lab file is valid.
func TestExamplesParse(t *testing.T) {
	files, err := filepath.Glob("../examples/*.yaml")
	if err != nil || len(files) < 4 {
		t.Fatalf("examples: %v %v", files, err)
	}
	for _, f := range files {
		if _, err := Load(f); err != nil {
			t.Errorf("%v", err)
		}
	}
}

func TestLinkDelayAndLossLayers(t *testing.T) {
	src := `name: wires
topology:
  kind: custom
  nodes: {h1: {kind: host}, h2: {kind: host}, s1: {kind: switch}, s2: {kind: switch}}
  links:
    - {endpoints: [h1:eth0, s1:eth1]}
    - {endpoints: [h2:eth0, s2:eth1], delay: {up: 3ms}, loss: {down: 0.5}}
    - {endpoints: [s1:eth2, s2:eth2]}
links:
  delay: 1ms
  loss: 0.01
  fabric: {delay: {up: 2ms, down: 250us}}
`
	s, err := Parse("wires.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	g, err := s.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	wire := func(node, ifname string) Impairment { return g.Node(node).Iface(ifname).Impairment() }
	for _, c := range []struct {
		node, ifname string
		want         Impairment
	}{
		{"h1", "eth0", Impairment{time.Millisecond, 0.01}},       // defaults, up
		{"s1", "eth1", Impairment{time.Millisecond, 0.01}},       // defaults, down
		{"h2", "eth0", Impairment{3 * time.Millisecond, 0.01}},   // own up, default loss up
		{"s2", "eth1", Impairment{time.Millisecond, 0.5}},        // own delay is up only: down keeps the default; own loss down
		{"s1", "eth2", Impairment{2 * time.Millisecond, 0.01}},   // fabric class, up
		{"s2", "eth2", Impairment{250 * time.Microsecond, 0.01}}, // fabric class, down
	} {
		if got := wire(c.node, c.ifname); got != c.want {
			t.Errorf("%s:%s wire = %+v, want %+v", c.node, c.ifname, got, c.want)
		}
	}
	if !g.HasDelayLines() {
		t.Error("HasDelayLines = false")
	}
	for _, bad := range []struct{ yaml, want string }{
		{"links: {delay: -1ms}", "cannot be negative"},
		{"links: {delay: 5}", "has no unit"},
		{"links: {loss: 1}", "probability in [0, 1)"},
		{"links: {delay: {sideways: 1ms}}", "unknown direction"},
	} {
		_, err := Parse("bad.yaml", []byte("name: bad\ntopology: {kind: star, hosts: 2}\n"+bad.yaml+"\n"))
		if err == nil || !strings.Contains(err.Error(), bad.want) || !strings.Contains(err.Error(), "bad.yaml:3") {
			t.Errorf("%s: error %v, want bad.yaml:3 and %q", bad.yaml, err, bad.want)
		}
	}
}

// In a k = 4 fat tree an edge switch reaches its own hosts on their links
// and every other host through each of its two uplinks (ECMP), and an
// aggregation switch reaches an edge's two hosts through the link down.
func TestHostsVia(t *testing.T) {
	g := mustResolve(t, "name: ft\ntopology: {kind: fattree, k: 4}\n")
	names := func(hs []*Node) []string {
		var out []string
		for _, h := range hs {
			out = append(out, h.Name)
		}
		return out
	}
	if got := names(g.HostsVia("p0e0", "eth0")); !slices.Equal(got, []string{"h0"}) {
		t.Errorf("p0e0:eth0 reaches %v, want [h0]", got)
	}
	for _, up := range []string{"eth2", "eth3"} {
		got := names(g.HostsVia("p0e0", up))
		if len(got) != 14 || slices.Contains(got, "h0") || slices.Contains(got, "h1") {
			t.Errorf("p0e0:%s reaches %v, want the 14 hosts not on p0e0", up, got)
		}
	}
	down := g.Node("p0a0").Ifaces[0]
	if got := names(g.HostsVia("p0a0", down.Name)); len(got) != 2 || down.Peer.Node.Kind != SwitchNode {
		t.Errorf("p0a0:%s (to %s) reaches %v, want one edge's two hosts", down.Name, down.Peer.Node.Name, got)
	}
	if g.HostsVia("p0e0", "eth9") != nil || g.HostsVia("nope", "eth0") != nil {
		t.Error("an unknown switch or interface reaches hosts")
	}
}
