// Package ndp is fabric's NDP: a receiver-pulled transport for switches
// that trim packets to their headers instead of dropping them, after
// Handley et al., "Re-architecting datacenter networks and stacks for low
// latency and high performance", SIGCOMM 2017, written for fabric from the
// paper's description. It runs on every host as `fabric transport ndp`
// under the transport contract (package transport), like any user's
// transport, and works with fabric's NDP switch ports (`ports: {ndp: {}}`,
// tc/ndp.go), which trim a DATA packet arriving at a full data queue and
// forward the header ahead of data.
//
// # Mechanisms (§3.2 unless noted)
//
//   - A message's first window (Args.IW, default one bandwidth-delay
//     product) is pushed at the host's line rate without waiting.
//   - The receiver answers every DATA packet at once: an ACK for a whole
//     packet, a NACK for a trimmed header (CHOPPED); and, while the
//     packets it still misses outnumber those on their way, it queues a
//     PULL.
//   - One pull queue per receiver, paced at one PULL per full-size packet
//     time on its link, so that the data the PULLs elicit arrives at the
//     link's rate; senders are served round robin, priority messages
//     (Args.PrioClass, Args.PrioBelow) first, with every PULL slot they
//     can use (§5, Fig. 10).
//   - A PULL carries a per-message counter; a sender sends as many packets
//     as the counter advanced, a NACKed packet before new data.
//   - An RTO is the last resort: a sender resends a packet neither ACKed
//     nor NACKed within SRTT + 4 RTTVAR of its measured round trips (at
//     least Args.RTO), a receiver that heard nothing of an unfinished
//     message for Args.RTO repeats its last PULL.
//   - Each DATA packet leaves from the next of Args.Paths source ports
//     (16384 by default, through one raw socket), so L4 ECMP sprays a
//     message over equal-cost paths (per-packet multipath, §3; spray.go);
//     control packets use one port.
//   - Every message is delivered to the application exactly once and in
//     order (a receiver holds packets past a gap until it fills), and
//     recorded as one flow when its last byte is delivered.
//   - A stream (the contract's long-lived flow) is a message without an
//     end, pulled until the process stops; the receiver samples it every
//     100 ms and records it once when it stops.
//
// # Where it differs from the paper's implementation
//
//   - UDP, not raw IP or DPDK: the switch recognises NDP by the magic byte
//     at the start of the UDP payload (wire.go).
//   - Messages, not connections: a PULL counter and a pull queue entry
//     belong to one message, and a sender's messages share its link round
//     robin. There is no handshake; the first packet to arrive, whichever
//     it is, creates the receiver's state, as the paper's does (§3.2).
//   - No return-to-sender: fabric's ports drop what the header queue
//     cannot hold, and the RTO recovers it.
//   - The pacers are Go threads sleeping in nanosleep, not a spinning core
//     (§4): a wake-up can be tens of µs late, made up by sending the next
//     PULL early (at most one packet time early).
//   - The receiver stops pulling for a message when the packets it misses
//     are all on their way, rather than on the LAST flag alone; LAST is
//     still set on a message's last packet.
package ndp
