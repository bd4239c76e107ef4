package experiments

import (
	"fmt"
	"hash/fnv"
	"time"

	"github.com/fabric-emu/fabric/emu"
	"github.com/fabric-emu/fabric/internal/units"
	"github.com/fabric-emu/fabric/tc"
)

// trialPlan is what one trial sends and what it watches.
type trialPlan struct {
	schedule      *Schedule
	dataSenders   []string // hosts whose NIC gets the pacer
	receiver      string   // the host whose link is the bottleneck
	bottleneckBPS float64
	rttFrom       string // the receiver and a sender: the ideal FCT's RTT
	rttTo         string
	pathLinks     int    // links between rttFrom and rttTo that serialise a lone packet
	farFrom       string // the lab's two farthest hosts: the contract's RTT
	farTo         string
	ports         []watchedPort
	// queryResponses is how many responses each incast query has.
	queryResponses int
}

// watchedPort is a switch port whose achieved rate the monitor reports.
type watchedPort struct {
	label    string
	target   tc.Target
	rate     units.Rate
	expected float64
}

// Schedule computes the messages of one trial of point p: from the traffic
// section, the point and seed alone, so that every scheme of a trial (and a
// rerun with the same seed) carries the same messages.
func (s *Spec) Schedule(g *emu.Graph, p Point, seed uint64) (*Schedule, error) {
	t := s.Traffic
	var hosts []ScheduleHost
	rates := map[string]float64{}
	for _, h := range g.Hosts() {
		hosts = append(hosts, ScheduleHost{Name: h.Name, Addr: h.Addr})
		rates[h.Name] = float64(h.Ifaces[0].Link.Rate)
	}
	b := newScheduleBuilder(t.Pattern, s.Duration, hosts, seed)
	clients, servers := s.clients(), s.servers()
	flows := max(p.Flows, 1)
	switch t.Pattern {
	case "dynamic":
		b.dynamic(clients, servers, rates, s.scheduleClasses(p))
	case "incast":
		workers := firstN(servers, p.Senders)
		b.incast(clients[0], workers, int64(p.Size), s.roundInterval(int64(len(workers))*int64(p.Size), rates[clients[0]]), t.Rounds)
	case "priority":
		long := servers[1 : 1+p.Senders]
		b.priority(clients[0], servers[0], long, int64(p.Size), int64(t.LongSize),
			s.roundInterval(int64(p.Size)+int64(len(long))*int64(t.LongSize), rates[clients[0]]), t.Rounds)
	case "static":
		var pairs [][2]string
		for _, c := range firstN(clients, p.Senders) {
			for _, srv := range without(servers, c) {
				pairs = append(pairs, [2]string{c, srv})
			}
		}
		b.streams(pairs, flows)
	case "poisson":
		pps, err := s.PoissonRate(g, p)
		if err != nil {
			return nil, err
		}
		b.poisson(clients[0], servers, int64(p.Size), pps)
	case "permutation":
		all := hostNamesOf(g)
		perm := Derangement(len(all), seed)
		var pairs [][2]string
		for i, h := range all {
			pairs = append(pairs, [2]string{h, all[perm[i]]})
		}
		b.streams(pairs, flows)
	default:
		return nil, fmt.Errorf("traffic pattern %q has no schedule", t.Pattern)
	}
	return b.done(), nil
}

// scheduleClasses are the dynamic pattern's independent streams: the
// traffic's classes, or else one class of its workload at the point's load.
func (s *Spec) scheduleClasses(p Point) []scheduleClass {
	if len(s.Traffic.Classes) > 0 {
		return s.classSchedule(p)
	}
	return []scheduleClass{{cdf: s.cdfs[s.WorkloadOf(p)], load: p.Load, arrival: s.Traffic.Arrival}}
}

// roundInterval is the time between incast queries or priority rounds:
// traffic.interval, or else the gap plus twice the time the receiver's
// link needs for a round's bytes, so that rounds seldom overlap while the
// schedule stays open loop (a round never waits for the previous one).
func (s *Spec) roundInterval(roundBytes int64, receiverBPS float64) time.Duration {
	if s.Traffic.Interval > 0 {
		return s.Traffic.Interval
	}
	ideal := time.Duration(float64(roundBytes) * 8 / receiverBPS * 1e9)
	return s.Traffic.Gap + max(2*ideal, time.Millisecond)
}

// plan decides who sends what in one trial, and what the monitor watches.
func (r *runner) plan(lab *emu.Lab, p Point, seed uint64) (*trialPlan, error) {
	sched, err := r.spec.Schedule(lab.Graph, p, seed)
	if err != nil {
		return nil, err
	}
	pl := &trialPlan{schedule: sched}
	switch r.spec.Traffic.Pattern {
	case "incast":
		pl.queryResponses = len(firstN(r.spec.servers(), p.Senders))
	case "priority":
		pl.queryResponses = 1 // the short message is its round's query
	}
	pl.dataSenders, pl.receiver = r.spec.bottleneck(lab.Graph, sched)
	pl.farFrom, pl.farTo = farthestHosts(lab.Graph)
	// The bottleneck is the switch port facing the receiver, at the rate
	// the scheme gives it.
	rx := lab.Graph.Node(pl.receiver).Ifaces[0].Peer
	rate, err := portRate(lab.Spec, rx)
	if err != nil {
		return nil, err
	}
	pl.bottleneckBPS = float64(rate)
	pl.rttFrom, pl.rttTo = pl.receiver, firstOther(pl.dataSenders, pl.receiver)
	pl.pathLinks = serialisingLinks(lab.Graph, pl.rttFrom, pl.rttTo)
	expected := float64(rate)
	switch r.spec.Traffic.Pattern {
	case "dynamic", "poisson":
		expected *= r.spec.OfferedLoad(p)
	case "incast", "priority":
		expected = 0 // bursts: no steady rate to expect
	}
	if err := pl.watch(lab, rx, expected); err != nil {
		return nil, err
	}
	if l := r.spec.Measure.LMM; l != nil {
		if i := lab.Graph.Node(l.Switch).Iface(l.To); i != nil && i != rx {
			if err := pl.watch(lab, i, 0); err != nil {
				return nil, err
			}
		}
	}
	return pl, nil
}

// bottleneck names the hosts that send data and the host whose link is the
// bottleneck: the first receiver of the schedule (the dynamic client, the
// incast aggregator, the static servers' first, the permutation's first
// destination).
func (s *Spec) bottleneck(g *emu.Graph, sched *Schedule) (senders []string, receiver string) {
	seen := map[string]bool{}
	for i := range sched.Len() {
		m := sched.Message(i)
		if receiver == "" {
			receiver = m.Dst
		}
		if !seen[m.Src] {
			seen[m.Src] = true
			senders = append(senders, m.Src)
		}
	}
	if receiver == "" { // an empty schedule (a very short duration): the traffic's first client
		receiver = s.clients()[0]
	}
	return senders, receiver
}

// farthestHosts are the first host and the host most switch hops from it:
// the contract tells transports the RTT between them (the longest path's).
func farthestHosts(g *emu.Graph) (string, string) {
	hosts := g.Hosts()
	if len(hosts) < 2 {
		return "", ""
	}
	dist := hopsTo(hosts[0].Ifaces[0].Peer.Node, g.Switches())
	far := hosts[1]
	for _, h := range hosts[1:] {
		if dist[h.Ifaces[0].Peer.Node] > dist[far.Ifaces[0].Peer.Node] {
			far = h
		}
	}
	return hosts[0].Name, far.Name
}

// serialisingLinks is how many links on a shortest path from host a to
// host b hold a lone packet for its serialisation time: those with a delay
// line in the direction of travel (tc/delay releases a packet at arrival +
// size at the link rate + delay). A rate-limited port without one passes
// a packet into an idle queue at once (HTB lends it the tokens), so it
// adds no store-and-forward to the ideal: on the k = 4 fat tree with no
// delay, small packets cross six 10 Mbit/s links in 21 µs.
func serialisingLinks(g *emu.Graph, a, b string) int {
	links := 0
	for _, out := range hostPath(g, a, b) {
		if !out.Impairment().IsZero() {
			links++
		}
	}
	return links
}

// hopsTo is the switch-to-switch distance of every switch from src.
func hopsTo(src *emu.Node, switches []*emu.Node) map[*emu.Node]int {
	dist := map[*emu.Node]int{src: 0}
	queue := []*emu.Node{src}
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		for _, i := range n.Ifaces {
			p := i.Peer.Node
			if _, seen := dist[p]; !seen && p.Kind == emu.SwitchNode {
				dist[p] = dist[n] + 1
				queue = append(queue, p)
			}
		}
	}
	return dist
}

func (pl *trialPlan) watch(lab *emu.Lab, i *emu.Iface, expected float64) error {
	target, err := lab.PortTarget(i.Node.Name, i.Name)
	if err != nil {
		return err
	}
	rt, err := portRate(lab.Spec, i)
	if err != nil {
		return err
	}
	pl.ports = append(pl.ports, watchedPort{label: i.Label(), target: target, rate: rt, expected: expected})
	return nil
}

// portRate is the resolved rate of a switch (or host) egress port.
func portRate(spec *emu.Spec, i *emu.Iface) (units.Rate, error) {
	port, err := spec.Port(i)
	if err != nil {
		return 0, err
	}
	return port.Rate, nil
}

func hostNamesOf(g *emu.Graph) []string {
	var out []string
	for _, h := range g.Hosts() {
		out = append(out, h.Name)
	}
	return out
}

func without(list []string, h string) []string {
	var out []string
	for _, x := range list {
		if x != h {
			out = append(out, x)
		}
	}
	return out
}

// firstN is the first n of list, or all of it when n is 0.
func firstN(list []string, n int) []string {
	if n > 0 && n < len(list) {
		return list[:n]
	}
	return list
}

func firstOther(list []string, h string) string {
	for _, x := range list {
		if x != h {
			return x
		}
	}
	return ""
}

// hostSeed gives every host (or stream) its own seed from the trial's.
func hostSeed(seed uint64, host string) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%s", seed, host)
	if v := h.Sum64(); v != 0 {
		return v
	}
	return 1
}
