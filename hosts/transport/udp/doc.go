// Package udp is fabric's open-loop datagram transport: `fabric transport
// udp`, run on every host of a trial under the transport contract (package
// transport) like every other. Each message of the schedule is one UDP
// datagram of the message's size, sent at its time and never again: no
// connection, no congestion control, no retransmission. It carries the
// poisson traffic pattern, whose packets' send times are a Poisson process,
// which is what a queueing-theory check of a port needs (experiments
// validate/…).
//
// Timing. Messages are sent by transport.Dispatch's clock, a real-time
// thread that sleeps to each send time in nanosleep and sends the datagram
// itself, so a send is late only by that thread's wake-up and the system
// call before it. The sender record at exit gives the lateness's
// percentiles, which a check of arrivals judges against its packets' time
// on the link.
//
// Packet format. A datagram's payload starts with the message's id and the
// sender's clock just before the send (CLOCK_REALTIME ns), 8 bytes each,
// big-endian; the rest is zero. The receiver records one Flow per
// datagram, ending at the kernel's receive timestamp (SO_TIMESTAMPNS), so
// its completion time is the network's one-way delay plus the sender's
// lateness, without the receiver's wake-up.
//
// Args (FABRIC_ARGS, all optional):
//
//	ecn   true sends every datagram ECN-capable (ECT(0)), so that a port's
//	      marker marks it (a CE mark reaches no one: there is no feedback)
//	port  the port receivers listen on (default 5311)
package udp
