package experiments

import (
	"math"
	"slices"
	"time"

	"github.com/fabric-emu/fabric/emu"
	"github.com/fabric-emu/fabric/experiments/cost"
	"github.com/fabric-emu/fabric/hosts/probe"
	"github.com/fabric-emu/fabric/tc/delay"
	"github.com/fabric-emu/fabric/tc/pacer"
)

// demand is what one trial asks of the machine, window by window, as the
// cost model prices it (cost.Window), and its busiest port, delay line and
// capture, in packets a second over its busiest window.
type demand struct {
	windows []cost.Window
	window  time.Duration
	busiest struct {
		port, line, capture          string
		portPPS, linePPS, capturePPS float64
	}
	messages int
	nodes    int // the lab's namespaces, the delay namespace included
	// shortest is the lab's shortest line delay, and gap how far apart
	// the delay loop's releases come on average over the trial (0
	// without lines).
	shortest, gap time.Duration
	// frames is each line's full frame time, by name, and early the
	// loop's batching tolerance (cost.DelayTurns).
	frames map[string]time.Duration
	early  time.Duration
}

// route is one host pair's path through a lab: the egress ports it
// crosses (the sender's NIC first), how many switches, the delay lines it
// passes, and the captures that see its packets.
type route struct {
	ports    []string
	switches int
	lines    []string
	captures []string
}

// hostPath is the egress interfaces of a shortest path from host a to
// host b through switches (the sender's NIC first); nil when there is
// none. Of equal-cost paths it takes the first in the lab's order, as
// ECMP takes one of them per flow.
func hostPath(g *emu.Graph, a, b string) []*emu.Iface {
	na, nb := g.Node(a), g.Node(b)
	if na == nil || nb == nil || a == b {
		return nil
	}
	via := map[*emu.Node]*emu.Iface{na: nil}
	queue := []*emu.Node{na}
	for len(queue) > 0 && via[nb] == nil {
		n := queue[0]
		queue = queue[1:]
		for _, out := range n.Ifaces {
			next := out.Peer.Node
			if _, seen := via[next]; seen || (next.Kind != emu.SwitchNode && next != nb) {
				continue
			}
			via[next] = out
			queue = append(queue, next)
		}
	}
	var path []*emu.Iface
	for out := via[nb]; out != nil; out = via[out.Node] {
		path = append(path, out)
	}
	slices.Reverse(path)
	return path
}

// routeOf is the route from a to b in g, with the LMM's captures l.
func routeOf(g *emu.Graph, a, b string, l *LMMSpec) route {
	var r route
	for _, out := range hostPath(g, a, b) {
		r.ports = append(r.ports, out.Label())
		if out.Node.Kind == emu.SwitchNode {
			r.switches++
		}
		if !out.Impairment().IsZero() {
			r.lines = append(r.lines, out.Label()+">"+out.Peer.Label())
		}
		if l == nil {
			continue
		}
		if in := out.Peer; in.Node.Name == l.Switch && slices.Contains(l.From, in.Name) {
			r.captures = append(r.captures, in.Label()+" in")
		}
		if out.Node.Name == l.Switch && out.Name == l.To {
			r.captures = append(r.captures, out.Label()+" out")
		}
	}
	return r
}

// flow is the fluid model's state of one host pair: what it has queued
// at its receiver's port, bytes and packets, and what arrives there in
// each window.
type flow struct {
	src, dst         uint16
	queued, queuedP  float64
	arrived, arrivP  []float64
	served, servedP  []float64
	route, reverse   route
	senderBPS        float64
	mtu              int
	receiverPortBPS  float64
	receiverPortName string
}

// demandOf models one trial of a scaled spec: sched's messages over lab
// (the scheme's, scaled), with the transport answering as answers says.
// Each message's bytes reach its receiver's port at its sender's link
// rate from its start, and leave at the port's rate, one fluid queue per
// receiver shared in proportion to what each pair has queued; the CPU is
// spent in the window they leave in.
func (s *Spec) demandOf(lab *emu.Spec, sc Scheme, sched *Schedule, window time.Duration) (*demand, error) {
	g, err := lab.Resolve()
	if err != nil {
		return nil, err
	}
	span := s.Duration + s.drainTime()
	n := max(int(math.Ceil(float64(span)/float64(window))), 1)
	d := &demand{windows: make([]cost.Window, n), window: window, messages: sched.Len(), nodes: len(g.Nodes)}
	if lines := g.Lines(); len(lines) > 0 {
		d.nodes++
		d.shortest = lines[0].Delay
		d.frames = map[string]time.Duration{}
		for _, l := range lines {
			d.shortest = min(d.shortest, l.Delay)
			d.frames[l.Name] = l.FullFrame()
		}
		d.early = delay.BatchTolerance(d.shortest)
	}
	flows := map[[2]uint16]*flow{}
	flowOf := func(src, dst uint16) (*flow, error) {
		if f := flows[[2]uint16{src, dst}]; f != nil {
			return f, nil
		}
		f, err := s.newFlow(lab, g, sched, src, dst, n)
		flows[[2]uint16{src, dst}] = f
		return f, err
	}
	var senders []string
	busy := make([]int64, len(sched.Hosts)) // when each host's last message ends, ns: before the start, idle
	for i := range busy {
		busy[i] = -int64(cost.HostIdleGap) - 1
	}
	for i := range sched.Len() {
		m := sched.msgs[i]
		f, err := flowOf(m.src, m.dst)
		if err != nil {
			return nil, err
		}
		w := min(int(m.t/int64(window)), n-1)
		d.windows[w].Messages++
		size := float64(m.size)
		if m.stream { // long-lived: its sender's rate until the schedule ends
			size = f.senderBPS / 8 * max(s.Duration.Seconds()-float64(m.t)/1e9, 0)
		}
		end := m.t + int64(size*8/max(f.senderBPS, 1)*1e9)
		for _, h := range []uint16{m.src, m.dst} {
			if m.t > busy[h]+int64(cost.HostIdleGap) {
				d.windows[w].Woken += 0.5
			}
			busy[h] = max(busy[h], end)
		}
		f.arrive(time.Duration(m.t), size, dataPackets(int64(size), f.mtu), window)
		if name := sched.Hosts[m.src].Name; !slices.Contains(senders, name) {
			senders = append(senders, name)
		}
	}
	s.addProbe(sched, window, flowOf)
	serve(flows, n, window)
	d.tally(flows, answers(sc.Transport.Name(), lab.Hosts.QuickAck))
	if sc.Pacer.On(false) {
		d.pace(lab, g, senders)
	}
	return d, nil
}

// newFlow starts a host pair's flow with its routes both ways.
func (s *Spec) newFlow(lab *emu.Spec, g *emu.Graph, sched *Schedule, src, dst uint16, n int) (*flow, error) {
	a, b := sched.Hosts[src].Name, sched.Hosts[dst].Name
	f := &flow{src: src, dst: dst, arrived: make([]float64, n), arrivP: make([]float64, n), served: make([]float64, n), servedP: make([]float64, n),
		route: routeOf(g, a, b, s.Measure.LMM), reverse: routeOf(g, b, a, s.Measure.LMM)}
	na, nb := g.Node(a), g.Node(b)
	if na == nil || nb == nil || len(na.Ifaces) == 0 || len(nb.Ifaces) == 0 {
		return f, nil
	}
	f.senderBPS, f.mtu = float64(na.Ifaces[0].Link.Rate), na.Ifaces[0].Link.MTU
	port := nb.Ifaces[0].Peer // the receiver's port
	rate, err := portRate(lab, port)
	if err != nil {
		return nil, err
	}
	f.receiverPortBPS, f.receiverPortName = float64(rate), port.Label()
	return f, nil
}

// arrive adds a message that starts at t to the windows its bytes arrive
// in at the sender's rate; what would arrive after the last window
// arrives in it.
func (f *flow) arrive(t time.Duration, bytes, packets float64, window time.Duration) {
	n := len(f.arrived)
	dur := time.Duration(bytes * 8 / max(f.senderBPS, 1) * 1e9)
	add := func(i int, share float64) {
		f.arrived[i] += bytes * share
		f.arrivP[i] += packets * share
	}
	if dur <= 0 {
		add(min(int(t/window), n-1), 1)
		return
	}
	for at, end := t, t+dur; at < end; {
		i := int(at / window)
		if i >= n-1 {
			add(n-1, float64(end-at)/float64(dur))
			return
		}
		next := min(time.Duration(i+1)*window, end)
		add(i, float64(next-at)/float64(dur))
		at = next
	}
}

// serve runs each receiver's port as a fluid queue: what is queued and
// arrives in a window leaves at the port's rate, shared in proportion,
// the rest waits for the next window; what is left after the last never
// leaves.
func serve(flows map[[2]uint16]*flow, n int, window time.Duration) {
	byPort := map[string][]*flow{}
	for _, f := range flows {
		byPort[f.receiverPortName] = append(byPort[f.receiverPortName], f)
	}
	for _, fs := range byPort {
		capacity := fs[0].receiverPortBPS / 8 * window.Seconds()
		for w := range n {
			var want float64
			for _, f := range fs {
				want += f.queued + f.arrived[w]
			}
			frac := 1.0
			if want > capacity && capacity > 0 {
				frac = capacity / want
			}
			for _, f := range fs {
				b, p := f.queued+f.arrived[w], f.queuedP+f.arrivP[w]
				f.served[w], f.servedP[w] = b*frac, p*frac
				f.queued, f.queuedP = b-f.served[w], p-f.servedP[w]
			}
		}
	}
}

// tally turns the flows' served packets into the windows' counts, and
// finds the busiest port, delay line and capture.
func (d *demand) tally(flows map[[2]uint16]*flow, answers float64) {
	ports, lines, caps := map[string][]float64{}, map[string][]float64{}, map[string][]float64{}
	add := func(m map[string][]float64, names []string, w int, v float64) {
		for _, name := range names {
			if m[name] == nil {
				m[name] = make([]float64, len(d.windows))
			}
			m[name][w] += v
		}
	}
	// A host wakes for each of its data packets (sent or received) when
	// they come more than cost.HostIdleGap apart: when its link takes
	// longer than that to carry one full packet, so that no burst brings
	// them closer, and its window carries too few for the gap to close.
	// Half a flow's packets' cost is at each end.
	perHost := map[uint16][]float64{}
	slow := map[uint16]bool{}
	for _, f := range flows {
		for h, bps := range map[uint16]float64{f.src: f.senderBPS, f.dst: f.receiverPortBPS} {
			if perHost[h] == nil {
				perHost[h] = make([]float64, len(d.windows))
			}
			for w, p := range f.servedP {
				perHost[h][w] += p
			}
			slow[h] = bps > 0 && float64(f.mtu)*8/bps > cost.HostIdleGap.Seconds()
		}
	}
	sparse := func(h uint16, w int) float64 {
		if n := perHost[h][w]; slow[h] && n > 0 && float64(d.window)/n > float64(cost.HostIdleGap) {
			return 0.5
		}
		return 0
	}
	for _, f := range flows {
		for w := range d.windows {
			data := f.servedP[w]
			if data == 0 {
				continue
			}
			back := data * answers
			win := &d.windows[w]
			win.DataPackets += data
			win.SparsePackets += data * (sparse(f.src, w) + sparse(f.dst, w))
			win.HopPackets += data*float64(f.route.switches) + back*float64(f.reverse.switches)
			win.DelayPackets += data*float64(len(f.route.lines)) + back*float64(len(f.reverse.lines))
			win.Captured += data*float64(len(f.route.captures)) + back*float64(len(f.reverse.captures))
			add(ports, f.route.ports, w, data)
			add(ports, f.reverse.ports, w, back)
			add(lines, f.route.lines, w, data)
			add(lines, f.reverse.lines, w, back)
			add(caps, f.route.captures, w, data)
			add(caps, f.reverse.captures, w, back)
		}
	}
	var released float64
	for name, ws := range lines {
		for w, n := range ws {
			d.windows[w].DelayTurns += cost.DelayTurns(n, d.frames[name], d.early)
		}
	}
	for w := range d.windows {
		released += d.windows[w].DelayPackets
	}
	if released > 0 {
		d.gap = time.Duration(float64(d.window) * float64(len(d.windows)) / released)
	}
	per := d.window.Seconds()
	d.busiest.port, d.busiest.portPPS = busiestOf(ports, per)
	d.busiest.line, d.busiest.linePPS = busiestOf(lines, per)
	d.busiest.capture, d.busiest.capturePPS = busiestOf(caps, per)
}

// busiestOf is the name with the most packets in one window, and that
// many a second.
func busiestOf(m map[string][]float64, per float64) (string, float64) {
	name, most := "", 0.0
	for k, ws := range m {
		for _, v := range ws {
			if v > most || v == most && v > 0 && k < name {
				name, most = k, v
			}
		}
	}
	return name, most / per
}

// pace adds the pacers' turns: one per T_r on each data sender.
func (d *demand) pace(lab *emu.Spec, g *emu.Graph, senders []string) {
	turns := 0.0
	for _, h := range senders {
		n := g.Node(h)
		if n == nil {
			continue
		}
		cfg, _ := lab.PacerConfig(n)
		if tr := cmpOrDuration(cfg.RateInterval, pacer.DefaultRateInterval); tr > 0 {
			turns += float64(d.window) / float64(tr)
		}
	}
	for w := range d.windows {
		d.windows[w].PacerTurns += turns
	}
}

// addProbe adds the LMM's probe stream, when measured: a 1500-byte packet
// every interval from its sender to its receiver (HULL §5.2), for the
// schedule's duration.
func (s *Spec) addProbe(sched *Schedule, window time.Duration, flowOf func(src, dst uint16) (*flow, error)) {
	pr := s.Measure.Probe
	if pr == nil {
		return
	}
	src := slices.IndexFunc(sched.Hosts, func(h ScheduleHost) bool { return h.Name == pr.From })
	dst := slices.IndexFunc(sched.Hosts, func(h ScheduleHost) bool { return h.Name == pr.To })
	if src < 0 || dst < 0 {
		return
	}
	f, err := flowOf(uint16(src), uint16(dst))
	if err != nil {
		return
	}
	const size = float64(probe.DefaultSize)
	pps := 1 / pr.every().Seconds()
	for i := range f.arrived {
		from := time.Duration(i) * window
		if from >= s.Duration {
			break
		}
		packets := min(window, s.Duration-from).Seconds() * pps
		f.arrived[i] += packets * size
		f.arrivP[i] += packets
	}
}

func cmpOrDuration(a, b time.Duration) time.Duration {
	if a > 0 {
		return a
	}
	return b
}
