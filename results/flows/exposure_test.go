package flows

import (
	"testing"
	"time"

	"github.com/fabric-emu/fabric/hosts/transport"
)

// A trial of 1000 one-packet messages, one every ms, all at slowdown 1
// except those that start inside a stall: those finish late together,
// as messages do when the machine stops everything at once.
func stalledTrial(stallFrom, stallTo int, class func(i int) string) (*transport.Set, Interval, Ideal) {
	ideal := Ideal{BottleneckBPS: 1e9, RTT: 200 * time.Microsecond}
	base := int64(1_700_000_000e9)
	stall := Interval{StartNS: base + int64(stallFrom)*1e6, EndNS: base + int64(stallTo)*1e6}
	set := &transport.Set{}
	for i := range 1000 {
		start := base + int64(i)*1e6
		end := start + int64(ideal.FCT(1000))
		if start >= stall.StartNS && start < stall.EndNS {
			end = stall.EndNS + int64(ideal.FCT(1000))
		}
		set.Flows = append(set.Flows, transport.Flow{ID: uint64(i + 1), Src: "h1", Dst: "h0", Size: 1000, Bytes: 1000,
			StartNS: start, EndNS: end, Class: class(i)})
	}
	return set, stall, ideal
}

func TestATailMadeInAStallIsDistorted(t *testing.T) {
	// A 12 ms stall holds 12 of 1000 messages: the top 1 % are all in it.
	set, stall, ideal := stalledTrial(500, 512, func(int) string { return "rpc" })
	a, err := Analyze(set, ideal, 0)
	if err != nil {
		t.Fatal(err)
	}
	ex := a.TailExposures([]Interval{stall})
	if len(ex) != 2 || ex[0].Group != "all" || ex[1].Group != "rpc" {
		t.Fatalf("groups %+v", ex)
	}
	e := ex[1]
	// The 10 flows at or above the p99 (nearest rank 990 of 1000) are
	// stalled ones; the stalled 12 and the one that starts as the stall
	// ends overlap it.
	if e.Flows != 1000 || e.Tail < MinTail || e.TailExposed != e.Tail || e.Exposed != 13 || !e.Distorted() {
		t.Fatalf("exposure %+v, distorted %v", e, e.Distorted())
	}
	// The same stall elsewhere in time leaves the tail alone: the tail
	// is the stalled messages, and they are not in the stretch.
	if elsewhere := a.TailExposures([]Interval{{StartNS: stall.StartNS + 200e6, EndNS: stall.EndNS + 200e6}}); elsewhere[1].TailExposed != 0 || elsewhere[1].Distorted() {
		t.Fatalf("a stretch away from the tail: %+v", elsewhere[1])
	}
}

func TestTailExposureIsPerClass(t *testing.T) {
	// The stall holds only store's messages (every other one), so store's
	// tail is the machine's; rpc's tail is its slowdown-1 messages' top
	// 1 %, spread over the trial, and not distorted.
	set, stall, ideal := stalledTrial(500, 540, func(i int) string {
		if i%2 == 0 {
			return "rpc"
		}
		return "store"
	})
	for i := range set.Flows {
		if set.Flows[i].Class == "rpc" {
			// rpc's messages in the stall stay on time: only store's waited.
			start := set.Flows[i].StartNS
			set.Flows[i].EndNS = start + int64(ideal.FCT(1000)) + int64(i)*10 // a spread: its tail is its last few messages
		}
	}
	a, err := Analyze(set, ideal, 0)
	if err != nil {
		t.Fatal(err)
	}
	byGroup := map[string]TailExposure{}
	for _, e := range a.TailExposures([]Interval{stall}) {
		byGroup[e.Group] = e
	}
	if !byGroup["store"].Distorted() || byGroup["rpc"].Distorted() {
		t.Fatalf("store %+v (want distorted), rpc %+v (want not)", byGroup["store"], byGroup["rpc"])
	}
}

func TestTooShortATailIsNotJudged(t *testing.T) {
	// 100 flows: the p99 is the top 1 or 2, below MinTail.
	set, stall, ideal := stalledTrial(50, 52, func(int) string { return "" })
	set.Flows = set.Flows[:100]
	a, err := Analyze(set, ideal, 0)
	if err != nil {
		t.Fatal(err)
	}
	e := a.TailExposures([]Interval{stall})[0]
	if e.Tail >= MinTail || e.TailExposed == 0 || e.Distorted() {
		t.Fatalf("exposure %+v, distorted %v", e, e.Distorted())
	}
}
