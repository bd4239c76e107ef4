// Package flows turns the transports' records (package hosts/transport)
// into flow completion times, slowdowns, incast query completion times and
// permutation throughput.
//
// # Slowdown and the ideal FCT
//
// slowdown = FCT / ideal, with ideal = size·8 / bottleneck rate, plus the
// store-and-forward of the last packet at every further link on the path
// that serialises a lone packet (one with a delay line: a rate-limited
// port alone passes a packet into an idle queue at once, so on a path with
// no such link the last packet crosses at once and only the packets before
// it wait for the bottleneck), plus half the unloaded RTT: FCTs are one-way (scheduled start to last byte
// at the receiver), and the ideal is the best time such a message can
// have, Homa's slowdown 1.0 (Montazeri's thesis, Fig. 6.1). Size is the
// application bytes the flow asked for, so header overhead (54 of every
// 1514 bytes on the wire) is part of the slowdown: an unloaded long flow's
// slowdown tends to about 1.04, not 1.
//
// The unloaded RTT must be measured in the same lab, because namespace
// forwarding costs tens of µs per hop on this machine and no constant would
// be right. The experiment runner measures it before the load starts, with
// the lab idle, between the same hosts as the flows, as the median of
// small request/response exchanges (a 1-byte request and a 1-byte response
// over an established TCP connection, 20 times); that includes both
// directions' forwarding and the endpoints' stack, exactly as an FCT does.
// It is passed in as Ideal.RTT and recorded in the trial's meta.json as
// "unloaded_rtt_ns" (see report.Meta).
package flows

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/fabric-emu/fabric/hosts/transport"
	"github.com/fabric-emu/fabric/results/stats"
)

// Ideal is what a flow would achieve alone in the lab.
type Ideal struct {
	BottleneckBPS float64       // the slowest link on the flow's path, bit/s
	RTT           time.Duration // unloaded RTT measured in the same lab
	// Links is how many links on the path hold a lone packet for its
	// serialisation: those with a delay line (a run's meta.json without
	// path_links has none).
	Links int
}

// storeAndForward is the most of a message one switch holds before it
// sends it on: one full-size packet.
const storeAndForward = 1500

// FCT is the ideal completion time of a message of size bytes, recorded
// one way (from its scheduled start to its last byte at the receiver, as
// every transport records under the contract): the transmission of all but
// its last packet at the bottleneck rate, the last packet's serialisation
// at each link that serialises a lone packet (min(size, 1500 B) per link,
// at the bottleneck rate), and half the unloaded RTT.
func (i Ideal) FCT(size int64) time.Duration {
	last := min(size, storeAndForward)
	bits := float64(size-last+int64(i.Links)*last) * 8
	return time.Duration(bits/i.BottleneckBPS*1e9) + i.RTT/2
}

// Bucket is a range of flow sizes in bytes, Min ≤ size ≤ Max.
type Bucket struct {
	Name     string
	Min, Max int64
}

// Contains reports whether size falls into b.
func (b Bucket) Contains(size int64) bool { return size >= b.Min && size <= b.Max }

// HULLBuckets are the two sizes of HULL's dynamic workload (§6.2, Table 4):
// exactly 1 KB = 1000 B and 10 MB = 10,000,000 B (decimal, as in
// the built-in workload hull_1k_10m).
var HULLBuckets = []Bucket{
	{Name: "1KB", Min: 1000, Max: 1000},
	{Name: "10MB", Min: 10_000_000, Max: 10_000_000},
}

// SizeBuckets cover all sizes (decimal units): <10KB, 10–100KB,
// 100KB–10MB (10 MB included), >10MB.
var SizeBuckets = []Bucket{
	{Name: "<10KB", Min: 0, Max: 9_999},
	{Name: "10-100KB", Min: 10_000, Max: 99_999},
	{Name: "100KB-10MB", Min: 100_000, Max: 10_000_000},
	{Name: ">10MB", Min: 10_000_001, Max: math.MaxInt64},
}

// BucketStats summarises the completed flows of one bucket.
type BucketStats struct {
	Bucket   string        `json:"bucket"`
	N        int           `json:"n"`
	FCTUS    stats.Summary `json:"fct_us"` // microseconds
	Slowdown stats.Summary `json:"slowdown"`
	fct, sd  []float64     // sorted samples, for CDFs
}

// FCTs returns the bucket's FCTs in µs, ascending.
func (b *BucketStats) FCTs() []float64 { return b.fct }

// Slowdowns returns the bucket's slowdowns, ascending.
func (b *BucketStats) Slowdowns() []float64 { return b.sd }

// Analysis is everything computed from one trial's records.
type Analysis struct {
	Flows int `json:"flows"`
	// Incomplete flows received fewer bytes than they asked for (cut off at
	// the end of the run, or failed); they are counted here and left out
	// of the FCT statistics rather than dropped silently.
	Incomplete int           `json:"incomplete"`
	Ideal      Ideal         `json:"ideal"`
	All        BucketStats   `json:"all"`
	HULL       []BucketStats `json:"hull"`
	Sizes      []BucketStats `json:"sizes"`
	// Spectrum is the slowdown spectrum (Homa's Fig. 6.1), when enough
	// flows completed; ShortHalf is the shortest 50 % of flows by count.
	Spectrum   []SpectrumBin `json:"spectrum,omitempty"`
	ShortHalf  BucketStats   `json:"short_half"`
	Queries    *QueryStats   `json:"queries,omitempty"`
	Throughput *Throughput   `json:"throughput,omitempty"`

	// samples are the completed flows' slowdowns, kept so that a class's
	// size ranges (Class) are cut from the same numbers as every table.
	samples []sample
}

// sample is one completed flow: its size, class, FCT (µs) and slowdown,
// and when it was in flight (CLOCK_REALTIME ns).
type sample struct {
	size           int64
	class          string
	fct, sd        float64
	startNS, endNS int64
}

// Analyze computes FCT and slowdown statistics for every completed flow,
// incast query completion times (queryResponses is how many responses a
// query has, 0 when unknown), and per-flow throughput of long-lived
// (sampled) flows. It fails if the ideal is not usable.
func Analyze(set *transport.Set, ideal Ideal, queryResponses int) (*Analysis, error) {
	if ideal.BottleneckBPS <= 0 {
		return nil, fmt.Errorf("flows: bottleneck rate %v bit/s must be positive", ideal.BottleneckBPS)
	}
	if ideal.RTT < 0 {
		return nil, fmt.Errorf("flows: unloaded RTT %v is negative", ideal.RTT)
	}
	a := &Analysis{Flows: len(set.Flows), Ideal: ideal}
	all := make([]sample, 0, len(set.Flows))
	sizes := make([]int64, 0, len(set.Flows))
	for _, f := range set.Flows {
		if f.Bytes < f.Size || f.EndNS < f.StartNS {
			a.Incomplete++
			continue
		}
		fct := time.Duration(f.FCTNanos())
		all = append(all, sample{size: f.Size, class: f.Class, fct: float64(fct) / 1e3, sd: float64(fct) / float64(ideal.FCT(f.Size)),
			startNS: f.StartNS, endNS: f.EndNS})
		sizes = append(sizes, f.Size)
	}
	a.samples = all
	a.All = a.collect("all", func(sample) bool { return true })
	for _, b := range HULLBuckets {
		a.HULL = append(a.HULL, a.collect(b.Name, func(s sample) bool { return b.Contains(s.size) }))
	}
	for _, b := range SizeBuckets {
		a.Sizes = append(a.Sizes, a.collect(b.Name, func(s sample) bool { return b.Contains(s.size) }))
	}
	sds := make([]float64, len(all))
	for i, s := range all {
		sds[i] = s.sd
	}
	a.Spectrum = spectrum(sizes, sds)
	a.ShortHalf = BucketStats{Bucket: "shortest 50%", sd: shortest(sizes, sds, 0.5)}
	a.ShortHalf.N = len(a.ShortHalf.sd)
	a.ShortHalf.Slowdown = stats.SummarizeSorted(a.ShortHalf.sd)
	a.Queries = queries(set, queryResponses)
	a.Throughput = throughput(set.Samples, ideal.BottleneckBPS)
	return a, nil
}

// collect summarises the completed flows that keep selects.
func (a *Analysis) collect(name string, keep func(sample) bool) BucketStats {
	b := BucketStats{Bucket: name}
	for _, s := range a.samples {
		if keep(s) {
			b.fct = append(b.fct, s.fct)
			b.sd = append(b.sd, s.sd)
		}
	}
	b.N = len(b.fct)
	b.FCTUS = stats.Summarize(b.fct)
	b.Slowdown = stats.Summarize(b.sd)
	return b
}

// Bucket returns the named bucket's statistics (from HULL, Sizes or "all").
func (a *Analysis) Bucket(name string) *BucketStats {
	if name == "all" {
		return &a.All
	}
	for _, list := range [][]BucketStats{a.HULL, a.Sizes} {
		for i := range list {
			if list[i].Bucket == name {
				return &list[i]
			}
		}
	}
	return nil
}

// QueryStats is the incast query completion time distribution: a query
// completes when the last of its workers' responses has arrived.
type QueryStats struct {
	N     int           `json:"n"`
	QCTUS stats.Summary `json:"qct_us"`
	qct   []float64
}

// QCTs returns every query completion time in µs, ascending.
func (q *QueryStats) QCTs() []float64 { return q.qct }

// queries are the trial's incast queries: the Query records when the
// transport wrote them, else the flows grouped by their query id (a query
// starts when its responses were scheduled and completes with the last).
func queries(set *transport.Set, responses int) *QueryStats {
	qs := set.Queries
	if len(qs) == 0 {
		qs = QueriesOf(set.Flows, responses)
	}
	if len(qs) == 0 {
		return nil
	}
	s := &QueryStats{}
	for _, q := range qs {
		s.qct = append(s.qct, float64(q.EndNS-q.StartNS)/1e3)
	}
	s.N = len(s.qct)
	s.QCTUS = stats.Summarize(s.qct)
	return s
}

// QueriesOf groups the flows that carry a query id into queries: a query
// starts with its earliest response and ends with its last. A query one of
// whose responses is incomplete, or (with responses > 0) missing, never
// completed and is left out.
func QueriesOf(flows []transport.Flow, responses int) []transport.Query {
	byID := map[uint64]*transport.Query{}
	broken := map[uint64]bool{}
	var order []uint64
	for _, f := range flows {
		if f.Query == 0 {
			continue
		}
		q := byID[f.Query]
		if q == nil {
			q = &transport.Query{ID: f.Query, Aggregator: f.Dst, Size: f.Size, StartNS: f.StartNS, EndNS: f.EndNS}
			byID[f.Query] = q
			order = append(order, f.Query)
		}
		q.Workers++
		q.StartNS, q.EndNS = min(q.StartNS, f.StartNS), max(q.EndNS, f.EndNS)
		broken[f.Query] = broken[f.Query] || f.Bytes < f.Size
	}
	slices.Sort(order)
	var out []transport.Query
	for _, id := range order {
		if q := byID[id]; !broken[id] && (responses == 0 || q.Workers == responses) {
			out = append(out, *q)
		}
	}
	return out
}

// Throughput is the per-flow throughput of long-lived flows (permutation,
// static), from their periodic samples.
type Throughput struct {
	Flows    int           `json:"flows"`
	MbpsDist stats.Summary `json:"mbps"`
	// Utilization is what the flows carried together over what their
	// receivers' links could take: the sum of the throughputs over the
	// number of distinct receivers times the bottleneck rate. Two flows
	// filling one receiver's link are 1, not 0.5.
	Utilization float64 `json:"utilization"`
	// Jain is Jain's fairness index of the per-flow throughputs,
	// (Σx)² / (n·Σx²): 1 when all are equal, 1/n when one takes all.
	Jain   float64 `json:"jain"`
	mbps   []float64
	Series []Series `json:"-"`
}

// PerFlowMbps returns every flow's mean throughput in Mbit/s, ascending.
func (t *Throughput) PerFlowMbps() []float64 { return t.mbps }

// Series is one flow's throughput over time, for time-series plots.
type Series struct {
	FlowID  uint64
	Label   string    // "src→dst"
	Seconds []float64 // interval end, seconds since the first sample of the run
	Mbps    []float64 // rate over the interval ending there
}

func throughput(samples []transport.Sample, idealBPS float64) *Throughput {
	if len(samples) == 0 {
		return nil
	}
	byFlow := map[uint64][]transport.Sample{}
	t0 := samples[0].TNS
	for _, s := range samples {
		byFlow[s.FlowID] = append(byFlow[s.FlowID], s)
		t0 = min(t0, s.TNS)
	}
	ids := make([]uint64, 0, len(byFlow))
	for id := range byFlow {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	t := &Throughput{}
	var total, squares float64
	receivers := map[string]bool{}
	for _, id := range ids {
		ss := byFlow[id]
		sort.Slice(ss, func(i, j int) bool { return ss[i].TNS < ss[j].TNS })
		if len(ss) < 2 || ss[len(ss)-1].TNS == ss[0].TNS {
			continue // one sample gives no rate
		}
		first, last := ss[0], ss[len(ss)-1]
		bps := float64(last.Bytes-first.Bytes) * 8 / (float64(last.TNS-first.TNS) / 1e9)
		t.mbps = append(t.mbps, bps/1e6)
		total += bps
		squares += bps * bps
		receivers[first.Dst] = true
		ser := Series{FlowID: id, Label: first.Src + "→" + first.Dst}
		for i := 1; i < len(ss); i++ {
			dt := float64(ss[i].TNS-ss[i-1].TNS) / 1e9
			if dt <= 0 {
				continue
			}
			ser.Seconds = append(ser.Seconds, float64(ss[i].TNS-t0)/1e9)
			ser.Mbps = append(ser.Mbps, float64(ss[i].Bytes-ss[i-1].Bytes)*8/dt/1e6)
		}
		t.Series = append(t.Series, ser)
	}
	t.Flows = len(t.mbps)
	if t.Flows == 0 {
		return nil
	}
	t.MbpsDist = stats.Summarize(t.mbps)
	t.Utilization = total / (float64(len(receivers)) * idealBPS)
	if squares > 0 {
		t.Jain = total * total / (float64(t.Flows) * squares)
	}
	return t
}
