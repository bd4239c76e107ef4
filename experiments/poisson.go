package experiments

import (
	"fmt"
	"slices"

	"github.com/fabric-emu/fabric/emu"
	"github.com/fabric-emu/fabric/hosts/transport/udp"
	"github.com/fabric-emu/fabric/internal/yamlfile"
)

// The poisson pattern is open-loop packets: messages of one size, each a
// single datagram (the udp transport), whose send times to the client are
// a Poisson process at load × the rate of the lab's port towards the
// client, counting each packet as its frame on that port (size plus
// udp.Overhead). The senders are the servers, each packet's drawn at
// random, which splits the process into independent Poisson processes,
// one per sender: their sum at the port is the one Poisson process.
//
//	traffic: {pattern: poisson, client: h0, servers: [h1, h2], size: 1472B, load: 0.6}
//
// It is what a check of a port against queueing theory sends (an M/D/1
// queue: Poisson arrivals, one service time), so its rate is the lab's
// port's, not a scheme's: the schedule does not depend on the scheme.

// poisson adds the pattern's packets: gaps drawn from an exponential law
// of mean 1/pps, each packet from a sender drawn at random.
func (b *scheduleBuilder) poisson(receiver string, senders []string, size int64, pps float64) {
	from := without(senders, receiver)
	if len(from) == 0 || pps <= 0 {
		return
	}
	gaps := Arrival{}.sampler(1/pps, b.rng("poisson", receiver))
	pick := b.rng("poisson-pick", receiver)
	end := b.s.Duration.Seconds()
	b.s.msgs = slices.Grow(b.s.msgs, int(pps*end*1.05)+64)
	b.startRun()
	for t := gaps(); t < end; t += gaps() {
		b.add(schedMsg{t: int64(t * 1e9), size: size, src: b.index[from[pick.IntN(len(from))]], dst: b.index[receiver]})
	}
}

// PoissonRate is the poisson pattern's packet rate at point p, packets a
// second: load × the rate of the lab's port towards the client, over the
// bits of one packet's frame on it.
func (s *Spec) PoissonRate(g *emu.Graph, p Point) (float64, error) {
	bps, err := s.clientPortRate(g)
	if err != nil {
		return 0, err
	}
	return p.Load * bps / (float64(int64(p.Size)+udp.Overhead) * 8), nil
}

// clientPortRate is the rate of the lab's own port (its ports section,
// without any scheme's) that sends to the traffic's first client.
func (s *Spec) clientPortRate(g *emu.Graph) (float64, error) {
	n := g.Node(s.clients()[0])
	if n == nil || len(n.Ifaces) == 0 {
		return 0, fmt.Errorf("no host %s", s.clients()[0])
	}
	port, err := s.LabSpec.Port(n.Ifaces[0].Peer)
	if err != nil {
		return 0, err
	}
	return float64(port.Rate), nil
}

// validatePoisson checks the poisson pattern: one client, a size that is
// one datagram on the client's link, and a load (validateScheme checks
// that the schemes send datagrams).
func (s *Spec) validatePoisson() error {
	t := &s.Traffic
	f := yamlfile.Field
	if len(s.clients()) != 1 {
		return f("client", "the poisson pattern sends to one host, got %d", len(s.clients()))
	}
	mtu := s.graph.Node(s.clients()[0]).Ifaces[0].Link.MTU
	sizes := orOne(s.Sweep.Size, t.Size)
	for _, sz := range sizes {
		if sz == 0 {
			return f("size", "the poisson pattern needs its packets' size (bytes of payload, e.g. 1472B)")
		}
		if most := int64(mtu) - (udp.Overhead - 14); int64(sz) < udp.HeaderLen || int64(sz) > most {
			return f("size", "want %d..%d bytes, one datagram on the client's link (MTU %d), got %v", udp.HeaderLen, most, mtu, sz)
		}
	}
	if t.Load == 0 && len(s.Sweep.Load) == 0 {
		return f("load", "the poisson pattern needs a load, a fraction of the client's port (here or in sweep.load)")
	}
	return nil
}
