// Package tcp is fabric's kernel-TCP transport: `fabric transport tcp`, run
// on every host of a trial under the transport contract (package
// transport), exactly as a user's transport is. It is HULL's traffic
// generator (§6.2) turned around: the schedule says who sends what, and
// this package carries it over Linux TCP with the scheme's congestion
// control.
//
// Connections. Each host opens Conns persistent connections (default 16,
// as HULL §6.2) to every destination it sends to, per DSCP (a connection's
// code point is fixed), before the schedule starts. A message goes to a
// random connection of its destination's pool and is written behind any
// earlier messages on it: pipelined, as HULL's generator does, so its
// completion time includes that wait, as an application sharing a
// connection would see it. A stream message (a long-lived flow) gets a
// connection of its own and is written until the trial ends.
//
// Framing. A connection opens with a hello (magic, kind, DSCP, stream id,
// the sender's congestion control and host name); a pooled connection then
// carries messages as [id u64][size u64] followed by size bytes. The
// receiver records a Flow when the last byte of a message has been read,
// with the message's scheduled send time as its start (the contract's
// rule), so a late sender shows in the completion time.
//
// Cost. At exit the process logs "tcp stats": the messages it sent and
// received, the TCP segments its host took in and sent (packets), its CPU
// time (cpu_us) and that time per message (cpu_us_per_message); the
// kernel's TCP work is in softirq and the sockets' system calls, not all
// of it in this process.
//
// Args (FABRIC_ARGS, all optional):
//
//	cc     congestion control of every sending socket (cubic, reno, bbr, dctcp);
//	       "" keeps the namespace's default
//	ecn    "on" or "off" writes net.ipv4.tcp_ecn in this namespace; unset leaves it
//	conns  persistent connections per destination and DSCP (default 16)
//	dscp   [{below: 2KB, value: CS7}]: messages below a size that the schedule
//	       gives no code point get this one (HULL Table 5's TCP-QoS)
//	port   the port receivers listen on (default 5301)
package tcp
