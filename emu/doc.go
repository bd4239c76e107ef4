// Package emu builds emulated datacenter fabrics on one Linux machine and
// is the entry point of fabric's Go API:
//
//	spec, err := emu.Load("examples/fattree-k4.yaml") // or emu.NewCustom("lab1").AddHost("h1")…
//	lab, err := emu.Up(ctx, spec)                    // namespaces, veths, addresses, routes, queues
//	defer lab.Down(ctx)                              // after checking err: nothing is left when Up fails
//	out, err := lab.Host("h0").Cmd(ctx, "ping", "-c1", lab.Host("h1").Addr().String())
//
// A lab file (Spec) names a topology kind (fattree, leafspine, star,
// dumbbell, custom); Resolve turns it into a Graph of nodes, interfaces,
// links, addresses and ECMP routes; Up makes it real: one network namespace
// per node, one veth pair per link, a queue on every egress port (package
// tc), and the hosts' runtime (package hosts). The Lab that Up returns owns
// what the lab runs in this process (HULL pacers) until Down.
//
// Names, as Mininet's net.py states its own:
//
//   - Labs are named by their file's `name:` (a-z, 0-9, '-', at most 24).
//   - Hosts are h0, h1, … in topology order; fat-tree switches are
//     p<pod>e<i> (edge), p<pod>a<i> (aggregation) and c<i> (core); leaf-spine
//     switches l<i> and s<i>; a star's switch is s0, a dumbbell's s0 and s1.
//   - Interfaces are eth0, eth1, … in the order links reach a node; a host's
//     link to its switch is its eth0.
//   - Every node is the namespace fab.<lab>.<node>, mounted at
//     /run/netns/fab.<lab>.<node> (internal/netnsutil); docker hosts are
//     containers of the same name whose namespace is mounted there too.
//   - A lab's state lives in /run/fabric/<lab>/ (LabDir): state.json, the
//     agent of its pacers and delay loop (agent.json) and its log; pinned BPF
//     objects live in /sys/fs/bpf/fabric/<lab>/.
//   - Addresses: fat-tree host i of edge switch e in pod p is 10.p.e.(i+2),
//     its gateway 10.p.e.1 (Al-Fares); other kinds number the n-th switch's
//     hosts 10.<n/256>.<n%256>.2, .3, …; switch-to-switch links come from
//     10.255.0.0/16. Every link is point to point: each end holds a /32 with
//     the other end as peer, so every packet crosses a switch.
//
// Nothing is created in the root namespace: each veth is made inside its
// first node's namespace with its peer placed straight into the second's.
package emu
