package transporttest

import (
	"math/rand/v2"
	"net/netip"
	"sync"
	"time"
)

// Network joins a test's endpoints in memory, as a lossy fabric would: it
// loses each packet with probability Loss, cuts a share Trim of the
// others to their header with Chop (a trimming switch, NDP's), and
// delivers each after its own random delay below MaxDelay, so packets
// overtake each other. Set the fields before the first Send.
type Network struct {
	Loss     float64
	MaxDelay time.Duration
	Trim     float64
	// Chop returns what is left of pkt when it is trimmed, or nil when it
	// cannot be (a control packet), and it then goes whole.
	Chop func(pkt []byte) []byte

	mu     sync.Mutex
	rng    *rand.Rand
	hosts  map[netip.Addr]func(src netip.Addr, pkt []byte)
	cut    bool
	deaf   map[netip.Addr]bool
	counts Counts
}

// Counts are what a Network did to the packets sent so far.
type Counts struct {
	Dropped int // lost at random (Loss)
	Trimmed int // cut to their header (Trim)
	Unheard int // lost because their receiver was deaf
}

// NewNetwork is a network whose random choices follow seed.
func NewNetwork(seed uint64) *Network {
	return &Network{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		hosts: map[netip.Addr]func(netip.Addr, []byte){}, deaf: map[netip.Addr]bool{}}
}

// Attach makes receive the endpoint at addr: it gets every packet sent to
// addr, with its source, on a goroutine of its own.
func (n *Network) Attach(addr netip.Addr, receive func(src netip.Addr, pkt []byte)) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.hosts[addr] = receive
}

// Send carries a copy of pkt from one endpoint to another.
func (n *Network) Send(from, to netip.Addr, pkt []byte) {
	pkt = append([]byte(nil), pkt...)
	n.mu.Lock()
	r := n.rng.Float64()
	delay := time.Duration(n.rng.Int64N(int64(max(n.MaxDelay, 1))))
	receive := n.hosts[to]
	switch {
	case n.cut:
		receive = nil
	case n.deaf[to]:
		n.counts.Unheard++
		receive = nil
	case r < n.Loss:
		n.counts.Dropped++
		receive = nil
	case r < n.Loss+n.Trim && n.Chop != nil:
		if c := n.Chop(pkt); c != nil {
			n.counts.Trimmed++
			pkt = c
		}
	}
	n.mu.Unlock()
	if receive != nil {
		time.AfterFunc(delay, func() { receive(from, pkt) })
	}
}

// Cut makes the network carry nothing more.
func (n *Network) Cut() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cut = true
}

// Deafen loses every packet to addr while deaf is true, as a stalled
// receiver's full socket buffer would.
func (n *Network) Deafen(addr netip.Addr, deaf bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.deaf[addr] = deaf
}

// Counts are what the network did so far.
func (n *Network) Counts() Counts {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.counts
}
