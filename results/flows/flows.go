// Package flows turns endpoint records (fabric/internal/records) into flow
// completion times, slowdowns, incast query completion times and
// permutation throughput.
//
// # Slowdown and the ideal FCT
//
// slowdown = FCT / ideal, with ideal = size·8 / bottleneck rate + unloaded
// RTT. Size is the application bytes the flow asked for, so header overhead
// (54 of every 1514 bytes on the wire) is part of the slowdown: an unloaded
// flow's slowdown tends to about 1.04, not 1, for long flows. This is the
// definition HULL and Homa use.
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

	"fabric/internal/records"
	"fabric/results/stats"
)

// Ideal is what a flow would achieve alone in the lab.
type Ideal struct {
	BottleneckBPS float64       // the slowest link on the flow's path, bit/s
	RTT           time.Duration // unloaded RTT measured in the same lab
}

// FCT is the ideal completion time of a flow of size bytes.
func (i Ideal) FCT(size int64) time.Duration {
	return time.Duration(float64(size)*8/i.BottleneckBPS*1e9) + i.RTT
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
// shared/workloads/hull_1k_10m.cdf).
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
	Queries    *QueryStats   `json:"queries,omitempty"`
	Throughput *Throughput   `json:"throughput,omitempty"`
}

// Analyze computes FCT and slowdown statistics for every completed flow,
// incast query completion times, and per-flow throughput of long-lived
// (sampled) flows. It fails if the ideal is not usable.
func Analyze(set *records.Set, ideal Ideal) (*Analysis, error) {
	if ideal.BottleneckBPS <= 0 {
		return nil, fmt.Errorf("flows: bottleneck rate %v bit/s must be positive", ideal.BottleneckBPS)
	}
	if ideal.RTT < 0 {
		return nil, fmt.Errorf("flows: unloaded RTT %v is negative", ideal.RTT)
	}
	a := &Analysis{Flows: len(set.Flows), Ideal: ideal}
	type sample struct{ fct, sd float64 }
	all := make([]sample, 0, len(set.Flows))
	sizes := make([]int64, 0, len(set.Flows))
	for _, f := range set.Flows {
		if f.Bytes < f.Size || f.EndNS < f.StartNS {
			a.Incomplete++
			continue
		}
		fct := time.Duration(f.FCTNanos())
		all = append(all, sample{fct: float64(fct) / 1e3, sd: float64(fct) / float64(ideal.FCT(f.Size))})
		sizes = append(sizes, f.Size)
	}
	collect := func(name string, keep func(int64) bool) BucketStats {
		b := BucketStats{Bucket: name}
		for i, s := range all {
			if keep(sizes[i]) {
				b.fct = append(b.fct, s.fct)
				b.sd = append(b.sd, s.sd)
			}
		}
		b.N = len(b.fct)
		b.FCTUS = stats.Summarize(b.fct)
		b.Slowdown = stats.Summarize(b.sd)
		return b
	}
	a.All = collect("all", func(int64) bool { return true })
	for _, b := range HULLBuckets {
		a.HULL = append(a.HULL, collect(b.Name, b.Contains))
	}
	for _, b := range SizeBuckets {
		a.Sizes = append(a.Sizes, collect(b.Name, b.Contains))
	}
	a.Queries = queries(set.Queries)
	a.Throughput = throughput(set.Samples, ideal.BottleneckBPS)
	return a, nil
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

func queries(qs []records.Query) *QueryStats {
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

// Throughput is the per-flow throughput of long-lived flows (permutation,
// static), from their periodic samples, and its fraction of the ideal (the
// bottleneck rate: in a permutation every host sends and receives one flow,
// so a flow alone on its path gets the host link rate).
type Throughput struct {
	Flows    int           `json:"flows"`
	MbpsDist stats.Summary `json:"mbps"`
	Fraction stats.Summary `json:"fraction_of_ideal"`
	// MeanFraction is the aggregate: total throughput over flows × ideal.
	MeanFraction float64 `json:"mean_fraction"`
	mbps         []float64
	Series       []Series `json:"-"`
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

func throughput(samples []records.Sample, idealBPS float64) *Throughput {
	if len(samples) == 0 {
		return nil
	}
	byFlow := map[uint64][]records.Sample{}
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
	var fractions []float64
	var total float64
	for _, id := range ids {
		ss := byFlow[id]
		sort.Slice(ss, func(i, j int) bool { return ss[i].TNS < ss[j].TNS })
		if len(ss) < 2 || ss[len(ss)-1].TNS == ss[0].TNS {
			continue // one sample gives no rate
		}
		first, last := ss[0], ss[len(ss)-1]
		bps := float64(last.Bytes-first.Bytes) * 8 / (float64(last.TNS-first.TNS) / 1e9)
		t.mbps = append(t.mbps, bps/1e6)
		fractions = append(fractions, bps/idealBPS)
		total += bps
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
	t.Fraction = stats.Summarize(fractions)
	t.MeanFraction = total / float64(t.Flows) / idealBPS
	return t
}
