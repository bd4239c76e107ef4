package experiments

import (
	"testing"

	"github.com/fabric-emu/fabric/emu"
)

// The ideal's store-and-forward counts only the links whose delay line
// serialises a lone packet, in the direction the packet travels.
func TestSerialisingLinks(t *testing.T) {
	for _, c := range []struct {
		name, topo, links string
		from, to          string
		want              int
	}{
		{"star, no delay", "{kind: star, hosts: 3}", "{rate: 10Mbit}", "h1", "h0", 0},
		{"star, delay both ways", "{kind: star, hosts: 3}", "{rate: 10Mbit, delay: 1ms}", "h1", "h0", 2},
		{"star, delay towards hosts", "{kind: star, hosts: 3}", "{rate: 10Mbit, delay: {down: 1ms}}", "h1", "h0", 1},
		{"fat tree, host links, across pods", "{kind: fattree, k: 4}", "{rate: 10Mbit, host: {delay: 1ms}}", "h15", "h0", 2},
		{"fat tree, every link, across pods", "{kind: fattree, k: 4}", "{rate: 10Mbit, delay: 1ms}", "h15", "h0", 6},
		{"fat tree, every link, same edge", "{kind: fattree, k: 4}", "{rate: 10Mbit, delay: 1ms}", "h1", "h0", 2},
		{"fat tree, uplinks only, across pods", "{kind: fattree, k: 4}", "{rate: 10Mbit, delay: {up: 1ms}}", "h15", "h0", 3},
	} {
		s, err := emu.Parse("lab.yaml", []byte("name: sl\ntopology: "+c.topo+"\nlinks: "+c.links+"\n"))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		g, err := s.Resolve()
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := serialisingLinks(g, c.from, c.to); got != c.want {
			t.Errorf("%s: %s to %s crosses %d serialising links, want %d", c.name, c.from, c.to, got, c.want)
		}
	}
}
