package experiments

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"time"

	"github.com/fabric-emu/fabric/emu"
	"github.com/fabric-emu/fabric/experiments/fluid"
	"github.com/fabric-emu/fabric/experiments/search"
	"github.com/fabric-emu/fabric/hosts/transport"
	"github.com/fabric-emu/fabric/hosts/transport/tcp"
	"github.com/fabric-emu/fabric/results/report"
)

// FirstGuessModel is search.first_guess's one model: SWP's fluid model
// of the bottleneck (package fluid).
const FirstGuessModel = "model"

// errNoModel says why a lab has no model: the fluid model is of one
// bottleneck between senders and a receiver on one switch.
var errNoModel = errors.New("the model needs a star: every sender and the receiver on one switch")

// guesser is the capacity search's model: the search's own trials'
// messages (the same draws every step carries), run through the fluid
// model at a tried rate and judged by the SLO table's verdict, as a
// step's trials are.
type guesser struct {
	spec      *Spec
	schedules []*Schedule
	seeds     []uint64 // the schedules' trial seeds
	receiver  string
	path      time.Duration // the path's delay outside the queue: to it, and from it to the receiver
	rtt       time.Duration
	links     int
	tcp       fluid.Sender // the senders' Linux TCP, as the model knows it
	progress  func(format string, args ...any)
}

// modelScheme is what the model takes of one scheme and weight vector:
// the receiver's port, how code points map to its bands, and the senders'
// connection pools. least prepares it once for all the rates it steps.
type modelScheme struct {
	port   fluid.Port
	bandOf [8]uint8
	pool   int
	sizes  []transport.SizeClass
}

// newGuesser draws the search's schedules (seed is the run's base seed),
// or says why the lab has no model.
func newGuesser(spec *Spec, seed uint64, progress func(string, ...any)) (*guesser, error) {
	g := spec.graph
	gs := &guesser{spec: spec, progress: progress}
	for n := 1; n <= spec.Trials; n++ {
		ts := TrialSeed(seed, "search", n)
		sched, err := spec.Schedule(g, Point{Load: spec.Traffic.Load, Traffic: "search"}, ts)
		if err != nil {
			return nil, err
		}
		gs.schedules, gs.seeds = append(gs.schedules, sched), append(gs.seeds, ts)
	}
	if err := gs.locate(g, gs.schedules[0]); err != nil {
		return nil, err
	}
	return gs, nil
}

// locate finds sched's bottleneck in g, the receiver's switch port, and
// the model's path delays and senders from its geometry, or says why the
// lab has no model.
func (gs *guesser) locate(g *emu.Graph, sched *Schedule) error {
	senders, rx := gs.spec.bottleneck(g, sched)
	hr := g.Node(rx)
	if len(senders) == 0 || hr == nil || len(hr.Ifaces) != 1 {
		return errNoModel
	}
	for _, name := range senders {
		if h := g.Node(name); h == nil || len(h.Ifaces) != 1 || h.Ifaces[0].Peer.Node != hr.Ifaces[0].Peer.Node {
			return errNoModel
		}
	}
	hs := g.Node(senders[0]).Ifaces[0]
	gs.receiver = rx
	gs.path = hs.Impairment().Delay + hr.Ifaces[0].Peer.Impairment().Delay
	gs.rtt = gs.path + hr.Ifaces[0].Impairment().Delay + hs.Peer.Impairment().Delay
	gs.links = serialisingLinks(g, rx, senders[0])
	gs.tcp = fluid.LinuxTCP(gs.rtt, hs.Link.MTU)
	return nil
}

// least bisects the model, as the search bisects trials, for the least
// rate in cfg's bracket at which scheme name with weights w meets every
// SLO, to a quarter of the search's tolerance.
func (gs *guesser) least(ctx context.Context, name string, w []int, cfg search.Config) (float64, bool, error) {
	t0 := time.Now()
	ms, err := gs.scheme(name, w)
	if err != nil {
		return 0, false, err
	}
	mc := search.Config{Lo: cfg.Lo, Hi: cfg.Hi, Tolerance: cfg.Tolerance / 4, Candidates: [][]int{w}}
	res, err := search.Least(ctx, mc, func(ctx context.Context, p search.Setting) (search.Outcome, error) {
		return gs.judge(ctx, ms, p.RateBPS)
	}, nil)
	if err != nil {
		return 0, false, err
	}
	ws := ""
	if len(w) > 0 {
		ws = " weights " + weightsText(w, ":")
	}
	if res.Met {
		gs.progress("search %s%s: the model's first guess is %s (%d model runs, %s)\n", name, ws, mbit(res.RateBPS),
			len(res.Steps)*len(gs.schedules), time.Since(t0).Round(time.Millisecond))
	} else {
		gs.progress("search %s%s: the model meets nowhere up to %s; plain bisection\n", name, ws, mbit(cfg.Hi))
	}
	return res.RateBPS, res.Met, nil
}

// scheme prepares the model of scheme name with weights w.
func (gs *guesser) scheme(name string, w []int) (*modelScheme, error) {
	sc := gs.spec.schemeAt(Point{Scheme: name, Load: gs.spec.Traffic.Load, Traffic: "search", Weights: w})
	port, bandOf, err := gs.port(sc)
	if err != nil {
		return nil, err
	}
	pool, err := connsOf(sc)
	if err != nil {
		return nil, err
	}
	return &modelScheme{port: port, bandOf: bandOf, pool: pool, sizes: sc.DSCP}, nil
}

// judge runs the model over every trial's messages at rate bps and judges
// them as a step's trials are judged (outcomeOf).
func (gs *guesser) judge(ctx context.Context, ms *modelScheme, bps float64) (search.Outcome, error) {
	metas := gs.spec.ClassMetas(Point{Load: gs.spec.Traffic.Load, Rate: stepRate(bps)})
	var trials []*report.TrialSummary
	for n, sched := range gs.schedules {
		if err := ctx.Err(); err != nil {
			return search.Outcome{}, err
		}
		set, err := gs.model(ms, bps, sched, gs.seeds[n])
		if err != nil {
			return search.Outcome{}, err
		}
		t, err := report.SummarizeFlows(set, report.Meta{BottleneckBPS: bps, UnloadedRTTNS: int64(gs.rtt),
			PathLinks: gs.links, Classes: metas})
		if err != nil {
			return search.Outcome{}, err
		}
		trials = append(trials, t)
	}
	return stepOutcome(trials), nil
}

// model runs one schedule's messages to the receiver through the fluid
// model of ms's port at bps, and returns them as records.
//
// Each message rides a connection of its sender's pool for its code
// point, drawn at random as the tcp transport draws it (hosts/transport/tcp):
// pool connections per sender and DSCP, the scheme's size classes giving
// a code point to messages the schedule gives none.
func (gs *guesser) model(ms *modelScheme, bps float64, sched *Schedule, seed uint64) (*transport.Set, error) {
	port := ms.port
	port.RateBPS = bps
	var msgs []transport.Message
	var flows []fluid.Flow
	pools := map[string]int{} // sender and code point → the first of its pool's connection numbers
	pick := rand.New(rand.NewPCG(seed, 1))
	for i := range sched.Len() {
		m := sched.Message(i)
		if m.Dst != gs.receiver {
			continue
		}
		if m.DSCP == 0 && len(ms.sizes) > 0 {
			m.DSCP = uint8(transport.DSCPPolicy{Classes: ms.sizes}.For(m.Size))
		}
		key := fmt.Sprintf("%s/%d", m.Src, m.DSCP)
		first, ok := pools[key]
		if !ok {
			first = 1 + len(pools)*ms.pool
			pools[key] = first
		}
		msgs = append(msgs, m)
		flows = append(flows, fluid.Flow{StartNS: m.TimeNS, Size: m.Size, Band: int(ms.bandOf[m.DSCP>>3]), Conn: first + pick.IntN(ms.pool)})
	}
	fct, err := fluid.Run(port, gs.tcp, gs.path, flows, gs.spec.Duration+gs.spec.drainTime())
	if err != nil {
		return nil, err
	}
	set := &transport.Set{}
	for i, m := range msgs {
		f := transport.Flow{ID: m.ID, Pattern: m.Pattern, Src: m.Src, Dst: m.Dst, Size: m.Size, DSCP: m.DSCP, Class: m.Class,
			StartNS: m.TimeNS, EndNS: m.TimeNS - 1}
		if fct[i] >= 0 {
			f.Bytes, f.EndNS = m.Size, m.TimeNS+int64(fct[i])
		}
		set.Flows = append(set.Flows, f)
	}
	return set, nil
}

// port is the model of the receiver's switch port under scheme sc: its
// bands, their service and the backlog at which its senders slow down
// (the ECN threshold, or without marking the buffer), and how DSCP class
// selectors map to its bands.
func (gs *guesser) port(sc Scheme) (fluid.Port, [8]uint8, error) {
	lab := gs.spec.labFor(sc, Point{}, "")
	g, err := lab.Resolve()
	if err != nil {
		return fluid.Port{}, [8]uint8{}, err
	}
	i := g.Node(gs.receiver).Ifaces[0].Peer
	p, err := lab.Port(i)
	if err != nil {
		return fluid.Port{}, [8]uint8{}, err
	}
	if p.NDP != nil || p.Phantom != nil {
		return fluid.Port{}, [8]uint8{}, errors.New("the model has no NDP ports or phantom queues")
	}
	threshold := float64(p.Buffer.BytesAt(p.MTU))
	if p.ECN != nil {
		threshold = float64(p.ECN.Threshold)
	}
	fp := fluid.Port{RateBPS: float64(p.Rate), Bands: max(p.Bands, 1), Weights: p.Weights, Fair: p.Buckets > 0, Threshold: threshold}
	bandOf := p.BandOf
	if fp.Bands == 1 {
		bandOf = [8]uint8{}
	}
	return fp, bandOf, nil
}

// ModelAnswer is one scheme's capacity by the model alone.
type ModelAnswer struct {
	Scheme  string
	Guesses []search.Guess // per weight candidate (one, unweighted, for other schemes)
}

// ModelCapacity answers spec's search with the fluid model alone, in
// seconds and without a lab: per scheme and weight candidate, the least
// rate in the search's bracket at which the model meets every SLO over
// the messages the search's trials carry with base seed seed (the same
// first guesses search.first_guess starts from). It is SWP's own use of
// its model (§3); fabric's emulated search is what checks it.
func ModelCapacity(ctx context.Context, spec *Spec, seed uint64, progress io.Writer) ([]ModelAnswer, error) {
	if spec.Search == nil {
		return nil, errors.New("experiment " + spec.Name + " has no search section")
	}
	if seed == 0 {
		seed = max(spec.Seed, 1)
	}
	gs, err := newGuesser(spec, seed, func(format string, args ...any) { fmt.Fprintf(progress, format, args...) })
	if err != nil {
		return nil, err
	}
	var out []ModelAnswer
	for _, name := range spec.sweptSchemes() {
		cfg := spec.searchConfig(name)
		a := ModelAnswer{Scheme: name}
		for _, w := range orNil(cfg.Candidates) {
			r, ok, err := gs.least(ctx, name, w, cfg)
			if err != nil {
				return out, err
			}
			a.Guesses = append(a.Guesses, search.Guess{Weights: w, RateBPS: r, OK: ok})
		}
		out = append(out, a)
	}
	return out, nil
}

// orNil is candidates, or one nil candidate (an unweighted scheme's).
func orNil(candidates [][]int) [][]int {
	if len(candidates) == 0 {
		return [][]int{nil}
	}
	return candidates
}

// ModelMarkdown is ModelCapacity's answers as a table.
func ModelMarkdown(spec *Spec, answers []ModelAnswer) string {
	t := report.Table{Header: []string{"scheme", "least rate by the model"}}
	for _, a := range answers {
		t.Rows = append(t.Rows, []string{a.Scheme, guessesText(a.Guesses, spec.Search.Rate.Max.String())})
	}
	return report.Blocks(report.Heading(2, "Capacity by the model alone"),
		fmt.Sprintf("SWP's fluid model of the bottleneck (no lab): per scheme, the least rate in [%s, %s] at which the model "+
			"meets every SLO over the search's %d trial(s) of messages. A guess to check with the emulated search, not a result.",
			spec.Search.Rate.Min, spec.Search.Rate.Max, spec.Trials),
		t.Markdown())
}

// connsOf is how many connections the tcp transport of scheme sc keeps
// per destination and code point (args.conns).
func connsOf(sc Scheme) (int, error) {
	if !sc.Transport.IsTCP() {
		return 0, errors.New("the model is of fabric's tcp transport")
	}
	switch v := sc.Args["conns"].(type) {
	case nil:
		return tcp.DefaultConns, nil
	case int:
		if v > 0 {
			return v, nil
		}
	}
	return 0, fmt.Errorf("args.conns %v: want a positive number of connections", sc.Args["conns"])
}
