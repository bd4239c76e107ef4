package homa

import (
	"fmt"
	"time"

	"github.com/fabric-emu/fabric/hosts/transport"
)

// Args are a scheme's settings for Homa (FABRIC_ARGS).
type Args struct {
	// UnschedLevels is how many of the 8 priorities unscheduled bytes use;
	// 0 chooses as the thesis does (§4.3.3).
	UnschedLevels int `json:"unsched_levels,omitempty"`
	// RTTBytes overrides the unscheduled bytes per message (default:
	// RTTBytes below).
	RTTBytes int64 `json:"rtt_bytes,omitempty"`
	// Pacer keeps the host's NIC queue to about one packet by sending at
	// the link rate (thesis Fig. 6.5); false sends every granted packet at
	// once. Default true.
	Pacer *bool `json:"pacer,omitempty"`
	// ResendAfter is the least a receiver waits for a granted packet
	// before it asks for the missing bytes (default 10 RTTs of a full
	// packet one way and a grant back, RTTBytes at the link rate, at least
	// 2 ms); what its grants have been taking to be answered raises it,
	// and a sender's silence timeout is twice it, raised by what DONEs
	// have been taking. A granted packet at a low scheduled priority can
	// wait behind higher ones for several RTTs without being lost: a
	// shorter timeout retransmits what is only queued.
	ResendAfter transport.Duration `json:"resend_after,omitempty"`
	// Port is where Homa listens (default 4000).
	Port int `json:"port,omitempty"`
}

// DefaultPort is where Homa listens unless args say otherwise.
const DefaultPort = 4000

func parseArgs(env *transport.Env) (Args, error) {
	var a Args
	if err := env.DecodeArgs(&a); err != nil {
		return a, err
	}
	return withDefaults(env, a)
}

// withDefaults fills what a scheme left out from the environment.
func withDefaults(env *transport.Env, a Args) (Args, error) {
	if a.Port == 0 {
		a.Port = DefaultPort
	}
	if a.Pacer == nil {
		on := true
		a.Pacer = &on
	}
	if a.RTTBytes == 0 {
		a.RTTBytes = RTTBytes(env)
	}
	if a.RTTBytes < int64(payloadSize(env.MTU)) {
		a.RTTBytes = int64(payloadSize(env.MTU)) // at least one packet goes out unscheduled
	}
	if a.ResendAfter == 0 {
		// RTTBytes' round trip, not the contract's small-packet RTT: on a
		// multi-hop fabric with no added delay, full packets' store-and-
		// forward makes the first many times the second, and a timeout
		// on the second re-sends what is only queued.
		rtt := time.Duration(float64(a.RTTBytes) * 8 / float64(max(env.LinkRate, 1)) * 1e9)
		a.ResendAfter = transport.Duration(max(10*rtt, 2*time.Millisecond))
	}
	if a.UnschedLevels < 0 || a.UnschedLevels >= Levels {
		return a, fmt.Errorf("args.unsched_levels: want 1..%d (0 chooses), got %d", Levels-1, a.UnschedLevels)
	}
	return a, nil
}

// payloadSize is how many message bytes one packet carries: the MTU less
// the IP (20), UDP (8) and Homa (24) headers.
func payloadSize(mtu int) int { return max(mtu, 576) - 20 - 8 - HeaderLen }

// RTTBytes is how many bytes a sender sends before the receiver's first
// grant can arrive: the link rate times the round trip of a full data
// packet one way and a grant back (thesis §3.2, §4.1). The contract's RTT
// is measured with small packets, so the data packet's serialisation on
// the two host links (the hops at the host's rate) is added.
func RTTBytes(env *transport.Env) int64 {
	frame := time.Duration(float64(env.MTU+38) * 8 / float64(max(env.LinkRate, 1)) * 1e9) // + Ethernet header, FCS, preamble, gap
	return int64((env.RTT + 2*frame).Seconds() * float64(env.LinkRate) / 8)
}
