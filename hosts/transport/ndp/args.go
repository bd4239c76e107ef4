package ndp

import (
	"fmt"
	"time"

	"github.com/fabric-emu/fabric/hosts/transport"
	"github.com/fabric-emu/fabric/internal/units"
)

// Args are a scheme's settings for NDP (FABRIC_ARGS).
type Args struct {
	// IW is the initial window: how many bytes of a message go at once,
	// before any PULL (NDP §3.2: "the sender sends a full window of data
	// without waiting for a response"). Default: IWBytes below.
	IW units.Size `json:"iw,omitempty"`
	// IWPackets sets the initial window in packets instead (the paper
	// speaks in packets: 23 in its simulations, §6.2, Fig. 20).
	IWPackets int `json:"iw_packets,omitempty"`
	// Paths is how many UDP source ports a sender sprays its DATA over,
	// one per packet in turn, so that switches' L4 ECMP hash spreads a
	// message over equal-cost paths (NDP §3: per-packet multipath;
	// spray.go says why so many). 1 turns spraying off. Default and most:
	// MaxPaths.
	Paths int `json:"paths,omitempty"`
	// RTO is the least time a sender waits for a packet's ACK or NACK
	// before it sends the packet again, and a receiver for any packet of
	// an unfinished message before it repeats its last PULL: the last
	// resort for packets and PULLs that are lost, not trimmed. The wait
	// grows with the round trips the sender measures (SRTT + 4 RTTVAR, as
	// TCP's). Default: RTO below.
	RTO transport.Duration `json:"rto,omitempty"`
	// PrioClass marks the messages of a traffic class as priority: their
	// PULLs go before every other PULL in the receiver's queue (NDP §5,
	// Fig. 10).
	PrioClass string `json:"prio_class,omitempty"`
	// PrioBelow marks messages smaller than this many bytes as priority.
	PrioBelow units.Size `json:"prio_below,omitempty"`
	// Port is where NDP listens (default 4100).
	Port int `json:"port,omitempty"`
}

// DefaultPort is where NDP listens unless args say otherwise.
const DefaultPort = 4100

// DefaultPaths is how many source ports a sender sprays over by default:
// all it may, so that the hash's luck evens out (spray.go).
const DefaultPaths = MaxPaths

func parseArgs(env *transport.Env) (Args, error) {
	var a Args
	if err := env.DecodeArgs(&a); err != nil {
		return a, err
	}
	return withDefaults(env, a)
}

// withDefaults fills what a scheme left out from the environment.
func withDefaults(env *transport.Env, a Args) (Args, error) {
	pay := payloadSize(env.MTU)
	switch {
	case a.IWPackets < 0:
		return a, fmt.Errorf("args.iw: want a positive window, got %d packets", a.IWPackets)
	case a.IWPackets > 0 && a.IW > 0:
		return a, fmt.Errorf("args: give iw or iw_packets, not both")
	case a.Paths < 0 || a.Paths > MaxPaths:
		return a, fmt.Errorf("args.paths: want 1..%d source ports, got %d", MaxPaths, a.Paths)
	}
	if a.IWPackets > 0 {
		a.IW = units.Size(a.IWPackets * pay)
	}
	if a.IW == 0 {
		a.IW = units.Size(IWBytes(env))
	}
	a.IW = max(a.IW, units.Size(pay)) // at least one packet is pushed
	if a.Paths == 0 {
		a.Paths = DefaultPaths
	}
	if a.Port == 0 {
		a.Port = DefaultPort
	}
	if a.RTO == 0 {
		a.RTO = transport.Duration(RTO(env))
	}
	return a, nil
}

// IWBytes is one bandwidth-delay product: the link rate times the round
// trip of a full data packet one way and a PULL back, as Homa's RTTBytes
// (the contract's RTT is measured with small packets, so a full packet's
// serialisation on the two host links is added), plus HostRTT of
// software. NDP §3.2 sets the initial window to fill the pipe in the
// first RTT; after it, each arrival earns one PULL, so the window stays
// what it was and must cover the software on the round trip too (§5.1,
// Fig. 11: the Linux prototype needed 25 packets where the simulator,
// without host delays, needed 15).
func IWBytes(env *transport.Env) int64 {
	return int64((env.RTT + 2*frameTime(env, env.MTU) + HostRTT).Seconds() * float64(env.LinkRate) / 8)
}

// HostRTT is the software time a packet and the PULL it earns spend on
// their two hosts, which the contract's RTT (kernel ICMP echoes) leaves
// out: receive, wake-ups, send, on both ends. Measured: one flow alone on
// a 100 Mbit/s star, with IW 3 packets (an 11 µs RTT), reached 75.5
// Mbit/s, a round trip of 480 µs of which 242 µs were the data packet's
// serialisation on two links; 250 µs covers the rest.
const HostRTT = 250 * time.Microsecond

// RTO is the default retransmission timeout: NDP's own, in packet times.
// NDP §3.2 puts the worst-case RTT of a 10 Gb/s fat tree with 8-packet
// queues of 9 KB jumbograms (7.2 µs each) at about 400 µs, "taking into
// account NDP's priority queuing", and its RTO as low as 1 ms: rtoFrames
// of the link's largest frame. Times scale and bytes do not, so the same
// count of this host's frames is the scaled RTO (at 50 Mbit/s with 9 KB
// frames, 200 ms: the paper's 1 ms × 200). Two unloaded RTTs are added for
// a lab's delay lines, which the paper's testbed did not have; the floor
// of 5 ms is for a Go process's wake-ups on a busy machine, which a
// shorter timeout mistakes for losses.
//
// Why not less: what delays a NACK is the header queue, which the switch
// serves ratio headers per data packet (§3.1, 10:1), so in a large incast
// NACKs wait behind data for many RTTs, and a timeout of a few RTTs
// re-sends packets that were trimmed, not lost.
func RTO(env *transport.Env) time.Duration {
	return max(2*env.RTT+rtoFrames*frameTime(env, env.MTU), 5*time.Millisecond)
}

// rtoFrames is NDP's RTO in packet times: 1 ms / 7.2 µs (§3.2).
const rtoFrames = 139

// frameTime is how long a packet of ipBytes takes on this host's link as
// fabric's ports count it: the IP packet and the 14-byte Ethernet header
// (qdiscs charge skb->len on a veth; tc/spec.go frameOverhead).
func frameTime(env *transport.Env, ipBytes int) time.Duration {
	return time.Duration(float64(ipBytes+14) * 8e9 / float64(max(env.LinkRate, 1)))
}
