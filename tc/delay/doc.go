// Package delay gives lab links propagation delay and random loss on a
// kernel without netem, fq, etf or a BPF qdisc, and without modules.
//
// # The mechanism
//
// A delayed link is spliced through the lab's delay namespace, which
// forwards between the link's two ends; in it, an nftables rule sends each
// delayed direction's packets to a netfilter queue of its own (xtables'
// NFQUEUE target through nftables' compat expression: this kernel has
// NFT_COMPAT but not NFT_QUEUE). The packet stays in the kernel and
// userspace learns its id, arrival time and length (the first 4 bytes of
// its IP header are copied), so a delay line copies no payload. One event
// loop serves every line of a lab, in a process of its own (Start; Loop
// is the handle): it reads arrivals in batches
// (recvmmsg), holds each packet until its arrival time plus its
// serialisation on the link (one packet after another at the link's rate:
// the shaper before it lets a packet go when it starts, not when its last
// bit has left) plus the line's delay, and releases every
// due packet of a line with one batched verdict (NFQNL_MSG_VERDICT_BATCH;
// at most 256 packets a system call, so that a line the CPU held back does
// not overflow the kernel's input backlog when it catches up), which keeps
// arrival order: a constant delay never reorders. Loss is a
// drop verdict drawn per packet from a seeded generator. Without the
// queue's bypass flag, packets of a queue nobody listens to are dropped:
// if the process holding the lines dies, delayed links stop, they never
// carry traffic undelayed.
//
// Why not the other candidate, a relay (AF_PACKET or AF_XDP) that copies
// frames between a link's two interfaces in the delay namespace: a packet
// socket takes its copy before tc's ingress hook runs, so the phantom
// queue's CE marks, which the port programs set at the sending port's veth
// peer, would be lost; the queue keeps the very skb that was marked. The
// relay's advantages (no per-packet netlink message, L2 transparency) did
// not outweigh it; the delay namespace's interfaces wear the far ends' MAC
// addresses instead, so the hosts and switches keep the neighbour entries
// they have without a delay line.
//
// # What it costs
//
// At high packet rates most of the loop's CPU per packet is the kernel
// forwarding each released packet on, in the loop thread's system call;
// at low rates wake-ups dominate. Timed sleeps on a virtual machine wake
// late, so the loop asks to wake earlier by the median overshoot and
// spins at most 20 µs to each release, at real-time priority so that no
// other thread holds its CPU at the time (priority.go); once the machine saturates,
// packets wait and lateness grows to milliseconds.
// BenchmarkDelayLineCapacity (emu's tests) measures the loop's rate, CPU
// per packet and lateness. Every trial records the lines' lateness and
// unasked drops and is flagged unfaithful when the p99 lateness exceeds
// max(10 % of the delay, 50 µs). MeasureMachine times an idle loop's
// releases on the machine itself, so that a flag can say how much of the
// lateness was the machine's timer.
package delay
