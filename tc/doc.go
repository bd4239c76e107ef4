// Package tc gives every port of a lab a datacenter switch queue: an HTB
// root at the port rate, strict-priority or weighted bands, bfifo/pfifo
// buffers whose limits are read back from the kernel, DSCP classification,
// and eBPF ECN marking (DCTCP threshold, HULL phantom queue). The lab
// file's side is docs/ports.md, the reasons docs/design.md "Ports".
//
// # Building a port
//
// emu resolves each egress port's settings (SwitchPorts.For, then
// PortSettings.Resolve) and calls Apply. A plain port is five rtnetlink
// messages on handles opened in the port's namespace (no tc binary, no
// eBPF): HTB root 1:, parent class 1:1 at the rate, leaf 1:10, fifo 10:.
// With bands, leaves 1:10..1:17 share 1:1 by HTB priority (strict) or by
// rate and quantum (weighted).
//
// # eBPF
//
// One object (bpf/port.bpf.c) is loaded per lab and process; its maps are
// pinned under /sys/fs/bpf/fabric/<lab>/, so `fabric port set` and
// `fabric status --ports` in other processes read and write them. Ports
// are keys (netns cookie, ifindex, hook): the cookie is read from the
// packet's device with CO-RE, because bpf_get_netns_cookie returns the
// initial namespace's for forwarded packets.
//
//   - port_egress (clsact egress, before the qdisc) sets skb->priority to the
//     band's HTB class from the DSCP, and runs the DCTCP marker.
//   - port_xmit (tp_btf/net_dev_start_xmit, one pinned link per lab) sees
//     packets leave the qdisc: it counts the ECN ports' departures and runs
//     the phantom queues at their true departure times, serialized at the
//     port rate: a veth delivers a burst that HTB lets through at once, a
//     real wire one frame per len/C, and HULL's PQ grows by (1 − γ) of each
//     frame only on the latter (TestPhantomQueueSerializes).
//   - port_peer (tc ingress of the veth peer) sets CE on the packets the
//     phantom queue decided to mark, and counts arrivals for the ECN marker.
//
// The DCTCP marker's queue is counted, not modelled: bytes into the fifo
// minus bytes handed to the driver (plus departures the tracepoint missed,
// learnt from the peer's count). A virtual queue drained at the port rate
// was tried first: it was off the tc backlog by +88 KB on average at
// 1 Gbit (bursts that HTB's token bucket lets straight through count as
// queue), and, with the bucket added to the model, by −20 KB at 500 Mbit on
// a busy machine (HTB falls behind its rate when softirqs run late). The
// counted queue is within 0.5–3 KB on average (TestECNThreshold).
//
// Concurrency: a port's state has a bpf_spin_lock. The phantom queue's
// "drain, then add" touches two fields (vq, last_ns) that must move
// together, and the ECN marker's drop prediction must see arrivals from
// all CPUs in one order; per-CPU counters or a single atomic cannot express
// either. Departure counts are plain atomic adds, outside the lock.
package tc
