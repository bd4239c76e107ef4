// Package homa is fabric's Homa: a receiver-driven message transport with
// 8 network priorities, after Montazeri's thesis ("Homa: A Receiver-Driven
// Low-Latency Transport Protocol Using Network Priorities", Stanford,
// 2019), written for fabric from the thesis's description. It runs on
// every host as `fabric transport homa` under the transport contract
// (package transport), like any user's transport.
//
// # Mechanisms
//
//   - Unscheduled bytes: a message's first RTTBytes go at once
//     (RTTBytes: the contract's measured RTT plus a full packet's
//     serialisation on the two host links, times the link rate).
//   - Unscheduled priorities: the cut-offs divide the workload's
//     unscheduled bytes, by the remaining size at which each packet is
//     sent, into equal shares per level (§3.3, Fig. 3.7); every host
//     derives them from the experiment's workload (FABRIC_WORKLOAD),
//     where the thesis's receivers measure theirs and send them out.
//   - Grants: each receiver grants, in SRPT order, to at most as many
//     messages as there are scheduled levels (the degree of
//     overcommitment, §5.2), the shortest at the highest level, keeping
//     RTTBytes granted beyond what has arrived.
//   - Senders send the packet of the message with the fewest bytes left
//     first, through a pacer that holds the NIC's queue to about one
//     packet (Fig. 6.5); `pacer: false` turns it off.
//   - Recovery: a receiver that hears nothing of a message for its
//     resend timeout asks for the first missing range (RESEND); a sender
//     busy with shorter messages says so (BUSY); duplicates are dropped.
//     Both ends' timeouts are resend_after or, when longer, what the
//     other end has been taking to answer (SRTT + 4 RTTVAR): a machine
//     the CPU holds up is slow, not lossy.
//   - A packet's priority p travels as DSCP CS<p>; fabric's 8-band ports
//     map CS7..CS0 to their strict bands, highest first.
//
// # Where it differs from the thesis and the kernel module
//
//   - UDP, not raw IP: a userspace process cannot own an IP protocol
//     number without a raw socket per host, and UDP's 8 bytes change no
//     behaviour here. The header is fabric's own (wire.go).
//   - One-way messages, not RPCs: fabric's schedules are messages, and
//     the thesis measures one-way times (Fig. 6.1). A receiver sends a
//     DONE when a message is whole, which the thesis's RPCs replace with
//     their response; a sender re-sends a message's first packet if its
//     receiver stays silent, since a receiver cannot ask for a message it
//     never saw. The receiver answers such a packet with BUSY when it
//     holds the message, after which the sender leaves recovery to it;
//     and at most a few messages per receiver are being re-sent at a
//     time, so that a slow receiver is not buried in re-sent packets.
//   - Cut-offs from the experiment's workload, not measured by receivers.
//   - The pacer runs in a Go thread sleeping in nanosleep: on this machine
//     a wake-up is late by tens of µs, so the pacer allows two packets of
//     slack; the thesis's simulated pacer hands a packet over exactly when
//     the previous one has left.
//   - Software time: every packet crosses the kernel's UDP stack and a
//     context switch on each end, tens of µs on this machine, where the
//     thesis assumes 1.5 µs; fabric's scaling (times x s) absorbs this
//     only while the per-packet cost stays small against a packet's
//     transmission time at the lab's rate.
package homa
