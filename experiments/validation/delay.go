package validation

import (
	"fmt"
	"slices"
	"time"

	"github.com/fabric-emu/fabric/emu"
	"github.com/fabric-emu/fabric/hosts/transport"
	"github.com/fabric-emu/fabric/hosts/transport/udp"
)

// pingFrame is emu's echo request (and its reply) on the wire: 11 bytes of
// data, ICMP 8, IPv4 20, Ethernet 14 (emu.Lab.RTT).
const pingFrame = 53

// delayChecks are validate/delay's checks of one trial: light Poisson
// traffic across delayed links, against what the lab file configures. A
// delay line releases a packet at its arrival, plus its frame's time at the
// link's rate after the line's previous packet (a wire's serialisation),
// plus the delay (tc/delay). Three checks:
//   - the unloaded RTT the runner measured (the fastest of five echoes,
//     before the traffic; what transports and ideal completion times use)
//     against the delays and the echoes' serialisation on the round trip,
//     within 10 %;
//   - a lone packet: the fastest datagram's one-way time (its receiver's
//     kernel timestamp less its scheduled time) against the delays and its
//     frame's serialisation on its path: no more than 50 µs early (a line
//     may release up to delay.BatchTolerance early, 10 µs, and the lab's
//     own forwarding only adds) and no more than 700 µs late (the fastest
//     of hundreds waits little for the machine, but an idle line on a
//     virtual machine can be a few hundred µs late at p99, and a missing
//     frame's time, 1211 µs, is well past it);
//   - a burst: the datagrams sent less than half a frame's time after the
//     one before leave the delayed link one frame time after it (the
//     median of their receive gaps, which a sender descheduled once does
//     not move), within −50 µs and +200 µs.
//
// The last two are the lab's serialisation, end to end, with the bounds
// a test of the lines alone would need.
func delayChecks(sc *scenario, t *trial) ([]Check, error) {
	g, err := sc.spec.LabSpec.Resolve()
	if err != nil {
		return nil, err
	}
	set, err := t.records()
	if err != nil {
		return nil, err
	}
	if len(set.Flows) < 50 {
		return nil, fmt.Errorf("%s: %d datagrams delivered, want hundreds", t.dir, len(set.Flows))
	}
	slices.SortFunc(set.Flows, func(a, b transport.Flow) int { return int(a.StartNS - b.StartNS) })
	rx, tx := g.Node(set.Flows[0].Dst), g.Node(set.Flows[0].Src)
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	us := func(d time.Duration) float64 { return float64(d) / 1e3 }
	rtt := pathTime(rx, tx, pingFrame) + pathTime(tx, rx, pingFrame)
	rttCheck := judged(Check{Name: "delay line RTT", Unit: "ms", Theory: ms(rtt), Measured: ms(time.Duration(t.meta.UnloadedRTTNS)), Tolerance: 0.10,
		Note: fmt.Sprintf("the runner's unloaded RTT %s↔%s: the fastest of 5 echoes before the traffic", rx.Name, tx.Name)}, t,
		func(c Check) string {
			if c.Measured > c.Theory {
				return "the delay lines release late (their loop's wake-ups: see the trial's line lateness) or the lab's forwarding is slow"
			}
			return "a line releases early: more than its batching allows (delay.BatchTolerance), or it does not delay the echo at all"
		})
	frame := set.Flows[0].Size + udp.Overhead
	var fastest int64 = 1 << 62
	for _, f := range set.Flows {
		fastest = min(fastest, f.EndNS-f.StartNS)
	}
	lone := judged(Check{Name: "delay line, lone packet", Unit: "µs", Theory: us(pathTime(tx, rx, int(frame))), Measured: us(time.Duration(fastest)),
		Band: &[2]float64{50, 700}, Note: fmt.Sprintf("the fastest of %d datagrams of %d bytes, scheduled send to the receiver's kernel timestamp", len(set.Flows), frame)}, t,
		func(c Check) string {
			if c.Measured > c.Theory {
				return "the line releases late, or the frame is serialised twice: the port before the line should pass a lone frame at once"
			}
			return "the line does not serialise: it releases at arrival plus the delay, and a lone frame crosses faster than the link's rate allows"
		})
	wire := linkFrameTime(rx, int(frame))
	var gaps []float64
	for i := 1; i < len(set.Flows); i++ {
		a, b := set.Flows[i-1], set.Flows[i]
		if time.Duration(b.StartNS-a.StartNS) < wire/2 {
			gaps = append(gaps, float64(b.EndNS-a.EndNS))
		}
	}
	spacing := judged(Check{Name: "delay line, burst spacing", Unit: "µs", Theory: us(wire), Measured: quantile(gaps, 0.5) / 1e3, Band: &[2]float64{50, 200},
		Note: fmt.Sprintf("the median receive gap of the %d datagrams sent under half a frame's time after the one before", len(gaps))}, t,
		func(c Check) string {
			if c.Measured < c.Theory {
				return "the line lets a burst through faster than the link's rate: it does not keep its link busy for each frame (linkFree)"
			}
			return "the line falls behind within a burst (its CPU per packet above a frame's time), or the receiver's CPU spreads its timestamps"
		})
	return []Check{rttCheck, lone, spacing}, nil
}

// pathTime is what the delay lines add to a frame of the given bytes from host
// a to host b through their switch: on each delayed direction, its delay
// and the frame's time at the link's rate (an undelayed port passes a
// lone frame at once).
func pathTime(a, b *emu.Node, bytes int) time.Duration {
	var d time.Duration
	for _, i := range []*emu.Iface{a.Ifaces[0], b.Ifaces[0].Peer} {
		if w := i.Impairment(); w.Delay > 0 {
			d += w.Delay + time.Duration(float64(bytes)*8/float64(i.Link.Rate)*1e9)
		}
	}
	return d
}

// linkFrameTime is a frame's time on host h's link.
func linkFrameTime(h *emu.Node, bytes int) time.Duration {
	return time.Duration(float64(bytes) * 8 / float64(h.Ifaces[0].Link.Rate) * 1e9)
}
