package emu_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/fabric-emu/fabric/emu"
	"github.com/fabric-emu/fabric/emu/emutest"
	"github.com/fabric-emu/fabric/internal/netnsutil"
	"github.com/fabric-emu/fabric/internal/units"
	"github.com/fabric-emu/fabric/tc/pacer"
)

const pacedLab = `name: %s
topology: {kind: star, hosts: 3}
links: {rate: 100Mbit}
hosts:
  pacer: {eta: 0.25}
  overrides:
    h1: {pacer: {beta: 100, line_rate: 50Mbit}}
    h2: {pacer: {enabled: false}}
`

// A host's pacer is the lab's pacer section with the host's override on
// top; the line rate defaults to the host's link.
func TestPacerConfigLayers(t *testing.T) {
	s, err := emu.Parse("p.yaml", []byte(fmt.Sprintf(pacedLab, "p")))
	if err != nil {
		t.Fatal(err)
	}
	g, err := s.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	if got := s.PacedHosts(g); !slices.Equal(got, []string{"h0", "h1"}) {
		t.Fatalf("paced hosts %v, want [h0 h1]", got)
	}
	h0, on0 := s.PacerConfig(g.Node("h0"))
	h1, on1 := s.PacerConfig(g.Node("h1"))
	h2, on2 := s.PacerConfig(g.Node("h2"))
	if !on0 || h0.Eta != 0.25 || h0.Beta != 0 || h0.LineRate != 100*units.Mbit {
		t.Errorf("h0: %+v on=%v, want eta 0.25, beta default, line 100Mbit", h0, on0)
	}
	if !on1 || h1.Eta != 0.25 || h1.Beta != 100 || h1.LineRate != 50*units.Mbit {
		t.Errorf("h1: %+v on=%v, want eta 0.25 (lab), beta 100 and line 50Mbit (own)", h1, on1)
	}
	if on2 || h2.Eta != 0.25 {
		t.Errorf("h2: %+v on=%v, want off with the lab's parameters", h2, on2)
	}
	off := s.Hosts.WithoutPacing()
	s.Hosts = off
	if got := s.PacedHosts(g); len(got) != 0 {
		t.Errorf("WithoutPacing still paces %v", got)
	}
	if c, _ := s.PacerConfig(g.Node("h1")); c.Beta != 100 {
		t.Errorf("WithoutPacing lost h1's parameters: %+v", c)
	}
}

// Up starts the pacers the lab file asks for in this process, records the
// process, and Down stops them.
func TestLabPacers(t *testing.T) {
	lab := emutest.Up(t, fmt.Sprintf(pacedLab, "t-emu-pacer"))
	ps := lab.Pacers()
	if len(ps) != 2 || ps["h0"] == nil || ps["h1"] == nil {
		t.Fatalf("pacers %v, want h0 and h1", ps)
	}
	if c := ps["h1"].Config(); c.Eta != 0.25 || c.Beta != 100 {
		t.Errorf("h1 pacer runs with %+v, want eta 0.25 beta 100", c)
	}
	h, err := emu.ReadAgent(lab.Name)
	if err != nil || h == nil {
		t.Fatalf("pacer agent: %v %v", h, err)
	}
	if h.PID != os.Getpid() || h.Detached || !h.Alive() || !slices.Equal(h.Pacers, []string{"h0", "h1"}) {
		t.Errorf("agent %+v, want this process (not detached) with h0,h1", h)
	}
	// The bucket hangs under the NIC's port class and is guaranteed only
	// its floor (HTB lets a class send its guaranteed rate whatever the
	// parent has left), so paced and unpaced traffic share the line rate;
	// h2 has none.
	for _, host := range []string{"h0", "h1", "h2"} {
		b, ok, err := pacer.ReadBucket(netnsutil.Path(lab.Name, host), "eth0")
		switch {
		case err != nil:
			t.Fatal(err)
		case host == "h2" && ok:
			t.Error("h2 has a pacer bucket although its override turns the pacer off")
		case host == "h2":
		case !ok || b.Parent != netlink.MakeHandle(1, 1):
			t.Errorf("%s: bucket found=%v parent %x, want under 1:1", host, ok, b.Parent)
		case b.Guaranteed > units.Mbit:
			t.Errorf("%s: bucket guaranteed %v; more than its floor lets the host exceed the line rate", host, b.Guaranteed)
		}
	}
	// The controllers run: with nothing to pace, R falls to its floor.
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err := ps["h0"].Stats()
		if err != nil {
			t.Fatal(err)
		}
		if st.Updates > 10 && st.Rate < 10*units.Mbit {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("h0 pacer not running: %+v", st)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := lab.StartPacers(context.Background(), []string{"h0"}); err == nil {
		t.Error("a second pacer on h0 was accepted")
	}
	if err := lab.Down(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(lab.Pacers()) != 0 {
		t.Errorf("pacers left after down: %v", lab.Pacers())
	}
	if err := ps["h0"].Err(); err != nil {
		t.Errorf("h0 pacer: %v", err)
	}
}
