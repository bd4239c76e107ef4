package experiments

import (
	"bufio"
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/fabric-emu/fabric/hosts/transport"
	"github.com/fabric-emu/fabric/hosts/workload"
)

// A Schedule is every message of one trial: who sends how many bytes to
// whom, and when. Experiments compute it from the traffic section, the
// point and the trial's seed alone, so every scheme of a trial carries the
// same messages (common random numbers) and a rerun with the same seed
// carries them again, byte for byte. Transports receive it through the
// transport contract: each host its own part (WriteFiles).
//
// Messages are held compactly (a 3-million-message schedule is 60 s of an
// 80 %-load W4 workload on 16 hosts at 100 Mbit/s) and turned into
// transport.Message lines only when written.
type Schedule struct {
	Pattern  string
	Duration time.Duration
	Hosts    []ScheduleHost // every host of the lab, in lab order
	Classes  []string       // class names, indexed by a message's class
	msgs     []schedMsg
}

// ScheduleHost is a host as the schedule names it.
type ScheduleHost struct {
	Name string
	Addr netip.Addr
}

// schedMsg is one message: 40 bytes instead of transport.Message's ~150.
type schedMsg struct {
	t, size  int64
	query    uint32
	src, dst uint16
	class    uint8
	dscp     uint8
	stream   bool
}

// Len is the number of messages.
func (s *Schedule) Len() int { return len(s.msgs) }

// Message returns message i as the contract's Message; IDs number the
// messages 1, 2, … in time order.
func (s *Schedule) Message(i int) transport.Message {
	m := s.msgs[i]
	src, dst := s.Hosts[m.src], s.Hosts[m.dst]
	out := transport.Message{
		ID: uint64(i + 1), TimeNS: m.t, Src: src.Name, SrcAddr: src.Addr, Dst: dst.Name, DstAddr: dst.Addr,
		Size: m.size, DSCP: m.dscp, Pattern: s.Pattern, Query: uint64(m.query), Stream: m.stream,
	}
	if int(m.class) < len(s.Classes) {
		out.Class = s.Classes[m.class] // "" when the traffic names no classes
	}
	return out
}

// Participants are the hosts that send or receive a message, in lab order.
func (s *Schedule) Participants() []string {
	in := make([]bool, len(s.Hosts))
	for _, m := range s.msgs {
		in[m.src], in[m.dst] = true, true
	}
	var out []string
	for i, h := range s.Hosts {
		if in[i] {
			out = append(out, h.Name)
		}
	}
	return out
}

// WriteFiles writes each participant's part to dir/schedule-<host>.jsonl
// (transport.ScheduleFileName): the messages it sends and those it
// receives, in time order. Each line is encoded once.
func (s *Schedule) WriteFiles(dir string) error {
	files := make([]*bufio.Writer, len(s.Hosts))
	var opened []*os.File
	defer func() {
		for _, f := range opened {
			f.Close()
		}
	}()
	open := func(h uint16) (*bufio.Writer, error) {
		if files[h] == nil {
			f, err := os.Create(filepath.Join(dir, transport.ScheduleFileName(s.Hosts[h].Name)))
			if err != nil {
				return nil, err
			}
			opened = append(opened, f)
			files[h] = bufio.NewWriterSize(f, 256<<10)
		}
		return files[h], nil
	}
	var line []byte
	for i, m := range s.msgs {
		line = transport.AppendMessage(line[:0], s.Message(i))
		for _, h := range []uint16{m.src, m.dst} {
			w, err := open(h)
			if err != nil {
				return err
			}
			w.Write(line)
		}
	}
	for _, w := range files {
		if w != nil {
			if err := w.Flush(); err != nil {
				return err
			}
		}
	}
	for _, f := range opened {
		if err := f.Close(); err != nil {
			return err
		}
	}
	opened = nil
	return nil
}

// scheduleBuilder accumulates messages for one trial.
type scheduleBuilder struct {
	s     *Schedule
	index map[string]uint16
	seed  uint64
	// runs are the starts of the runs of messages added in time order
	// (one per dynamic stream), which done merges instead of sorting
	// everything: a 60 s W4 schedule holds millions of messages.
	runs []int
}

func newScheduleBuilder(pattern string, d time.Duration, hosts []ScheduleHost, seed uint64) *scheduleBuilder {
	b := &scheduleBuilder{s: &Schedule{Pattern: pattern, Duration: d, Hosts: hosts, Classes: []string{""}},
		index: map[string]uint16{}, seed: seed}
	for i, h := range hosts {
		b.index[h.Name] = uint16(i)
	}
	return b
}

func (b *scheduleBuilder) add(m schedMsg) { b.s.msgs = append(b.s.msgs, m) }

// rng is a generator of its own for one stream of draws (a host's
// arrivals, a class's sizes…), so that changing one stream leaves the
// others as they were.
func (b *scheduleBuilder) rng(stream ...string) *rand.Rand {
	return rand.New(rand.NewPCG(hostSeed(b.seed, fmt.Sprint(stream)), 0x5c4ed))
}

// startRun says that the messages added from now until the next startRun
// come in time order.
func (b *scheduleBuilder) startRun() { b.runs = append(b.runs, len(b.s.msgs)) }

// compareMsgs orders messages by time, then sender, receiver, class and
// size: a total order, so equal draws give equal files.
func compareMsgs(x, y schedMsg) int {
	return cmp.Or(cmp.Compare(x.t, y.t), cmp.Compare(x.src, y.src), cmp.Compare(x.dst, y.dst),
		cmp.Compare(x.class, y.class), cmp.Compare(x.size, y.size))
}

// done orders the messages (compareMsgs) and returns the schedule. Each
// run is sorted on its own (in linear time: pdqsort finds the order a
// run already has) and the runs are then merged, pairwise, which costs
// far less than sorting them together.
func (b *scheduleBuilder) done() *Schedule {
	msgs := b.s.msgs
	bounds := append(slices.Clone(b.runs), len(msgs))
	if len(b.runs) == 0 || b.runs[0] != 0 {
		bounds = append([]int{0}, bounds...)
	}
	var parts [][]schedMsg
	for i := 0; i+1 < len(bounds); i++ {
		if part := msgs[bounds[i]:bounds[i+1]]; len(part) > 0 {
			slices.SortFunc(part, compareMsgs)
			parts = append(parts, part)
		}
	}
	b.s.msgs = mergeRuns(parts)
	return b.s
}

// mergeRuns merges sorted runs in one pass: each message out is the
// least of the runs' heads, found by a scan (a schedule has one run per
// receiver and class, a few dozen; the scan compares times first, which
// is cheap, and rarely needs the full order).
func mergeRuns(parts [][]schedMsg) []schedMsg {
	if len(parts) == 1 {
		return parts[0]
	}
	total := 0
	for _, p := range parts {
		total += len(p)
	}
	out := make([]schedMsg, 0, total)
	for len(parts) > 0 {
		best := 0
		for i := 1; i < len(parts); i++ {
			x, y := &parts[i][0], &parts[best][0]
			if x.t < y.t || x.t == y.t && compareMsgs(*x, *y) < 0 {
				best = i
			}
		}
		out = append(out, parts[best][0])
		if parts[best] = parts[best][1:]; len(parts[best]) == 0 {
			parts = slices.Delete(parts, best, best+1)
		}
	}
	return out
}

// scheduleClass is one independent stream of messages of the dynamic
// pattern: its sizes, how much of each receiver's link it loads, and how
// its arrivals are spaced.
type scheduleClass struct {
	name    string
	cdf     *workload.CDF
	load    float64 // fraction of each receiver's link rate
	arrival Arrival
	dscp    uint8
}

// dynamic adds open-loop arrivals for every receiver and class: each
// receiver gets messages from randomly chosen senders (never itself) at a
// mean rate of load × its link rate / the mean size (HULL §6.2), with
// inter-arrival times from the class's law.
func (b *scheduleBuilder) dynamic(receivers, senders []string, rates map[string]float64, classes []scheduleClass) {
	b.s.Classes = nil
	// Room for the expected count and a little more, at once: growing a
	// slice of millions by doubling copies it each time.
	expected := 0.0
	for _, c := range classes {
		for _, rx := range receivers {
			expected += b.s.Duration.Seconds() * c.load * rates[rx] / (c.cdf.Mean() * 8)
		}
	}
	b.s.msgs = slices.Grow(b.s.msgs, int(expected*1.05)+64)
	for ci, c := range classes {
		b.s.Classes = append(b.s.Classes, c.name)
		for _, rx := range receivers {
			from := without(senders, rx)
			if len(from) == 0 {
				continue
			}
			meanGap := c.cdf.Mean() * 8 / (c.load * rates[rx]) // seconds between arrivals
			gaps := c.arrival.sampler(meanGap, b.rng("gaps", c.name, rx))
			sizes := c.cdf.NewSampler(hostSeed(b.seed, "sizes/"+c.name+"/"+rx))
			pick := b.rng("pick", c.name, rx)
			end := b.s.Duration.Seconds()
			b.startRun()
			for t := gaps(); t < end; t += gaps() {
				b.add(schedMsg{t: int64(t * 1e9), size: sizes.Next(), src: b.index[from[pick.IntN(len(from))]],
					dst: b.index[rx], class: uint8(ci), dscp: c.dscp})
			}
		}
	}
}

// incast adds queries from one aggregator: every period, each worker
// sends size bytes to it at once (query q, numbered from 1).
func (b *scheduleBuilder) incast(aggregator string, workers []string, size int64, period time.Duration, rounds int) {
	for q := 0; rounds == 0 || q < rounds; q++ {
		t := time.Duration(q) * period
		if t >= b.s.Duration {
			break
		}
		for _, w := range workers {
			b.add(schedMsg{t: int64(t), size: size, src: b.index[w], dst: b.index[aggregator], query: uint32(q + 1)})
		}
	}
}

// Classes of the priority pattern's messages.
const (
	classShort = "short"
	classLong  = "long"
)

// priority adds rounds of one short message against long ones to one
// receiver, all starting at once (NDP §5, Fig. 10): every period, short
// (size bytes, class "short", query q+1, so that the report's query
// completion time is its completion time) and one longSize message from
// each of long (class "long"). With no long senders the short message
// runs alone: its idle completion time.
func (b *scheduleBuilder) priority(receiver, short string, long []string, size, longSize int64, period time.Duration, rounds int) {
	b.s.Classes = []string{classShort, classLong}
	for q := 0; rounds == 0 || q < rounds; q++ {
		t := int64(time.Duration(q) * period)
		if t >= int64(b.s.Duration) {
			break
		}
		b.add(schedMsg{t: t, size: size, src: b.index[short], dst: b.index[receiver], query: uint32(q + 1), class: 0})
		for _, l := range long {
			b.add(schedMsg{t: t, size: longSize, src: b.index[l], dst: b.index[receiver], class: 1})
		}
	}
}

// streams adds long-lived flows, flows per (sender, receiver) pair, from
// time 0 until the trial ends.
func (b *scheduleBuilder) streams(pairs [][2]string, flows int) {
	for _, p := range pairs {
		for range flows {
			b.add(schedMsg{src: b.index[p[0]], dst: b.index[p[1]], stream: true})
		}
	}
}

// Arrival is an inter-arrival law: Poisson (exponential gaps) by default,
// or log-normal with shape Sigma, the burstier arrivals SWP uses (its
// Fig. 1: σ = 2). Both have the mean the load asks for.
type Arrival struct {
	LogNormalSigma float64 `yaml:"lognormal_sigma,omitempty" json:"lognormal_sigma,omitempty"`
}

// sampler returns a function that draws gaps of the given mean (seconds).
func (a Arrival) sampler(mean float64, rng *rand.Rand) func() float64 {
	if s := a.LogNormalSigma; s > 0 {
		// E[exp(μ + σZ)] = exp(μ + σ²/2) = mean.
		mu := math.Log(mean) - s*s/2
		return func() float64 { return math.Exp(mu + s*rng.NormFloat64()) }
	}
	return func() float64 { return rng.ExpFloat64() * mean }
}

// Derangement returns a uniformly random permutation of 0..n-1 with no
// fixed point, seeded: host i sends to host d[i], so every host sends
// exactly one flow and receives exactly one (the NDP/HULL permutation
// matrix). Rejection sampling: a random permutation is a derangement with
// probability about 1/e, so a few shuffles suffice. n < 2 has no
// derangement and returns nil.
func Derangement(n int, seed uint64) []int {
	if n < 2 {
		return nil
	}
	rng := rand.New(rand.NewPCG(seed, 0xde4a))
	for {
		p := rng.Perm(n)
		if noFixedPoint(p) {
			return p
		}
	}
}

func noFixedPoint(p []int) bool {
	for i, v := range p {
		if i == v {
			return false
		}
	}
	return true
}
