package experiments

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fabric-emu/fabric/experiments/cost"
	"github.com/fabric-emu/fabric/internal/dirs"
	"github.com/fabric-emu/fabric/results/report"
)

// testProfile is a machine whose only costs are those given: every other
// cost is zero, so that a plan's figures can be worked by hand.
func testProfile(c cost.Costs) *cost.Profile {
	if c.Transports == nil {
		c.Transports = map[string]cost.Transport{"tcp": {}}
	}
	return &cost.Profile{CPUs: 2, Kernel: "k", CPUModel: "m", Fabric: "f", Date: time.Now(), Costs: c}
}

// demandOfText is the plan's demand for the first point of an
// experiment file's text, seed 1.
func demandOfText(t *testing.T, text string) *demand {
	t.Helper()
	spec, err := Parse("plan.yaml", []byte(text), "")
	if err != nil {
		t.Fatal(err)
	}
	p := spec.Points()[0]
	sched, err := spec.Schedule(spec.graph, p, 1)
	if err != nil {
		t.Fatal(err)
	}
	d, err := spec.demandOf(spec.labFor(spec.schemeAt(p), p, "plan"), spec.schemeAt(p), sched, cpuSampleEvery)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// A tiny incast, counted by hand: two servers send h0 14,480 bytes each
// (ten 1,448-byte payloads) every second for three seconds, through one
// switch whose LMM captures eth1 and eth2 arriving and eth0 leaving.
func TestPlanCountsPackets(t *testing.T) {
	const text = `name: tiny
lab: {name: tiny, topology: {kind: star, hosts: 3}, links: {rate: 100Mbit}}
schemes: {tcp: {cc: cubic}}
traffic: {pattern: incast, client: h0, servers: rest, size: 14480B, interval: 1s}
duration: 3s
measure: {lmm: {switch: s0, from: [eth1, eth2], to: eth0}}
`
	d := demandOfText(t, text)
	var sum cost.Window
	for _, w := range d.windows {
		sum.Messages += w.Messages
		sum.Woken += w.Woken
		sum.DataPackets += w.DataPackets
		sum.HopPackets += w.HopPackets
		sum.Captured += w.Captured
		sum.DelayPackets += w.DelayPackets
	}
	// 3 rounds × 2 servers = 6 messages of 10 packets; TCP ACKs every
	// second one, and data and ACKs each cross the one switch; every data
	// packet is captured twice (arriving at s0:eth1 or eth2, leaving
	// eth0), no ACK (it arrives at eth0 and leaves by eth1 or eth2). A
	// round's two responses find both servers idle, and h0 idle for the
	// first: three of four ends woken, 1.5 messages' worth a round.
	want := cost.Window{Messages: 6, Woken: 4.5, DataPackets: 60, HopPackets: 60 + 30, Captured: 120}
	if sum != want {
		t.Errorf("windows sum to %+v, want %+v", sum, want)
	}
	// The span is the 3 s of traffic and the incast's 2 s drain, in
	// 100 ms windows; a round's 20 packets (29 KB, 2.3 ms at 100 Mbit/s)
	// leave the receiver's port in the window they arrive in.
	if len(d.windows) != 50 || d.windows[10].DataPackets != 20 || d.windows[11].DataPackets != 0 {
		t.Errorf("%d windows, window 10 has %g data packets and window 11 %g; want 50, 20 and 0", len(d.windows), d.windows[10].DataPackets, d.windows[11].DataPackets)
	}
	if d.busiest.port != "s0:eth0" || d.busiest.portPPS != 200 {
		t.Errorf("busiest port %s at %g packets/s, want s0:eth0 at 200 (20 in a 100 ms window)", d.busiest.port, d.busiest.portPPS)
	}
	if d.busiest.capture != "s0:eth0 out" || d.busiest.capturePPS != 200 || d.busiest.line != "" || d.messages != 6 {
		t.Errorf("busiest capture %s at %g, line %q, %d messages; want s0:eth0 out at 200, none, 6", d.busiest.capture, d.busiest.capturePPS, d.busiest.line, d.messages)
	}
}

// pathExperiment is a paper-scale star of two hosts, h1 sending h0 one
// long-lived flow at the link's 10 Gbit/s.
const pathExperiment = `name: ladder
lab: {name: lad, topology: {kind: star, hosts: 2}, links: {rate: 10Gbit}}
scale: auto
schemes: {tcp: {cc: cubic}}
traffic: {pattern: static, client: h1, servers: h0, flows: 1}
duration: 100ms
`

// The ladder's choice, by hand: a long-lived flow keeps the receiver's
// port at its rate, C/s / (8 × 1,448 bytes) data packets a second, and
// every one and half as many ACKs cross the switch at 15 µs each. At
// C = 10 Gbit/s that is 12.95 cores at s = 1: 97 % of two cores at
// A data packet is priced as sparse, waking its hosts, only where its
// link takes longer than cost.HostIdleGap to carry a full packet: 64 KB
// responses every 150 ms at 5 Mbit/s (1,500-byte packets 2.4 ms apart)
// are sparse at both ends, the same at 100 Mbit/s (0.12 ms apart, a
// burst of 5 ms) at neither, though their windows carry as few packets.
func TestPlanCountsSparsePackets(t *testing.T) {
	for _, c := range []struct {
		rate   string
		sparse float64 // share of data packets
	}{{"5Mbit", 1}, {"100Mbit", 0}} {
		text := `name: sparse
lab: {name: sparse, topology: {kind: star, hosts: 2}, links: {rate: ` + c.rate + `}}
schemes: {tcp: {cc: cubic}}
traffic: {pattern: incast, client: h0, servers: rest, size: 64KB, interval: 150ms}
duration: 3s
`
		d := demandOfText(t, text)
		var data, sparse float64
		for _, w := range d.windows {
			data += w.DataPackets
			sparse += w.SparsePackets
		}
		if data == 0 || math.Abs(sparse/data-c.sparse) > 1e-9 {
			t.Errorf("%s: %g of %g data packets sparse, want a share of %g", c.rate, sparse, data, c.sparse)
		}
	}
}

// s = 10, above the 60 % the ladder allows; 49 % at s = 20.
func TestLadderPicksTheLeastFaithfulScale(t *testing.T) {
	spec, err := Parse("ladder.yaml", []byte(pathExperiment), "")
	if err != nil {
		t.Fatal(err)
	}
	prof := testProfile(cost.Costs{HopUS: 15})
	plan, err := spec.Plan(PlanOptions{Profile: prof})
	if err != nil {
		t.Fatal(err)
	}
	pp := plan.Points[0]
	share := func(s float64) float64 { return 100 * 10e9 / s / 8 / 1448 * 1.5 * 15e-6 / 2 }
	if pp.Scale != 20 || math.Abs(pp.PeakPct-share(20)) > 0.01 || math.Abs(pp.MeanPct-share(20)) > 0.01 {
		t.Errorf("s = %g, peak %.2f %%, mean %.2f %%; want s = 20 at %.2f %%", pp.Scale, pp.PeakPct, pp.MeanPct, share(20))
	}
	if !pp.Faithful() || !strings.Contains(pp.Why, "s = 10: tcp's busiest window 97 %") {
		t.Errorf("verdict %q, why %q; want faithful, and s = 10's 97 %% as the reason", pp.Verdict, pp.Why)
	}
	// At the chosen s a trial is 100 ms × 20 of traffic and no drain, on
	// a lab of three nodes, each costing 0.1 s, beside 1 s per trial.
	prof.Costs.Trial = cost.TrialTime{FixedS: 1, NodeS: 0.1}
	if plan, err = spec.Plan(PlanOptions{Profile: prof}); err != nil {
		t.Fatal(err)
	}
	if math.Abs(plan.WallS-3.3) > 1e-9 {
		t.Errorf("wall %.3f s, want 2 s of traffic and 1.3 s of overhead", plan.WallS)
	}
	// --max-wall that no rung meets: refused, with the least s that fits.
	_, err = spec.Plan(PlanOptions{Profile: prof, MaxWall: 2 * time.Second})
	var we *WallError
	if !errors.As(err, &we) || !strings.Contains(err.Error(), "--max-wall 2s: the run is predicted to take 3s at the least s that keeps each point faithful (base s=20)") {
		t.Errorf("max wall: %v", err)
	}
}

// A delay line whose packets come closer than twice its loop's cost per
// packet moves the ladder up however idle the cores: with 2 µs of delay
// on the receiver's link, its line carries the flow's data, 863 k packets
// a second at s = 1; a loop needing 10 µs a packet wants them 20 µs
// apart, 50 k a second, first reached at s = 20 (43 k).
func TestLadderKeepsTheDelayLoopAhead(t *testing.T) {
	text := strings.Replace(pathExperiment, "links: {rate: 10Gbit}", "links: {rate: 10Gbit, delay: {down: 2us}}", 1)
	spec, err := Parse("ladder.yaml", []byte(text), "")
	if err != nil {
		t.Fatal(err)
	}
	plan, err := spec.Plan(PlanOptions{Profile: testProfile(cost.Costs{LoopPacketUS: 4, VerdictUS: 6})})
	if err != nil {
		t.Fatal(err)
	}
	pp := plan.Points[0]
	if pp.Scale != 20 || pp.Line != "s0:eth0>h0:eth0" || !strings.Contains(pp.Why, "s = 10: tcp's busiest delay line has a packet every 11.6 µs") {
		t.Errorf("s = %g, line %q at %.0f/s, why %q", pp.Scale, pp.Line, pp.LinePPS, pp.Why)
	}
}

// A plan at a fixed or emulation scale keeps it, and predicts the
// monitor's verdict there: the flow at s = 1 saturates both cores.
func TestPlanAtAFixedScale(t *testing.T) {
	spec, err := Parse("ladder.yaml", []byte(strings.Replace(pathExperiment, "scale: auto", "scale: 1", 1)), "")
	if err != nil {
		t.Fatal(err)
	}
	plan, err := spec.Plan(PlanOptions{Profile: testProfile(cost.Costs{HopUS: 15})})
	if err != nil {
		t.Fatal(err)
	}
	if pp := plan.Points[0]; pp.Scale != 1 || pp.Why != "" || !strings.HasPrefix(pp.Verdict, "flagged: cpu-saturated (idle below 20 % in 100 % of windows)") {
		t.Errorf("s = %g, why %q, verdict %q", pp.Scale, pp.Why, pp.Verdict)
	}
}

// A machine whose timer is late moves the ladder up until the lines'
// limit, a tenth of their delay and at least 50 µs, covers it: 2 µs of
// delay is 400 µs at s = 200 (limit 50 µs) and 1 ms at s = 500 (limit
// 100 µs), where the 80 µs the timer is late fits.
func TestLadderWaitsForTheTimer(t *testing.T) {
	text := strings.Replace(pathExperiment, "links: {rate: 10Gbit}", "links: {rate: 10Gbit, delay: {down: 2us}}", 1)
	spec, err := Parse("ladder.yaml", []byte(text), "")
	if err != nil {
		t.Fatal(err)
	}
	late := []cost.Lateness{{SleepUS: 1, P99US: 80}, {SleepUS: 1e6, P99US: 80}}
	plan, err := spec.Plan(PlanOptions{Profile: testProfile(cost.Costs{Lateness: late})})
	if err != nil {
		t.Fatal(err)
	}
	pp := plan.Points[0]
	if pp.Scale != 500 || pp.LateLimitUS != 100 || !strings.Contains(pp.Why, "s = 200: the machine's timer, 80 µs late at p99") {
		t.Errorf("s = %g, limit %g µs, why %q; want 500, 100 µs, and s = 200's timer as the reason", pp.Scale, pp.LateLimitUS, pp.Why)
	}
}

// A resumed run plans nothing anew: it keeps the s of its run.json and
// takes the machine's profile only to re-plan after a flagged trial. On a
// machine with no profile, a trial its plan predicted faithful and the
// monitor flagged must leave the plan as it was, not end the run.
func TestResumedRunKeepsItsPlanWithoutAProfile(t *testing.T) {
	t.Setenv(dirs.StateEnv, t.TempDir()) // a machine with no profile
	spec, err := Parse("tiny.yaml", []byte(`name: tiny
lab: {name: tiny, topology: {kind: star, hosts: 3}, links: {rate: 100Mbit}}
schemes: {tcp: {cc: cubic}}
traffic: {pattern: incast, client: h0, servers: rest, size: 14480B, interval: 1s}
duration: 3s
`), "")
	if err != nil {
		t.Fatal(err)
	}
	plan, err := spec.Plan(PlanOptions{Profile: testProfile(cost.Costs{HopUS: 15})})
	if err != nil {
		t.Fatal(err)
	}
	p := spec.Points()[0]
	if pp := plan.Points[0]; pp.Point != p.Name || !pp.Faithful() {
		t.Fatalf("plan of %s: %+v, want it predicted faithful", p.Name, pp)
	}
	var progress strings.Builder
	r := &runner{spec: spec, opts: Options{Progress: &progress}, run: &RunFile{Plan: plan}, dir: t.TempDir()}
	if err := r.planRun(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r.profile != nil || r.run.Plan != plan {
		t.Fatalf("resumed on a machine with no profile: profile %v, plan replaced %v; want none and the same plan", r.profile, r.run.Plan != plan)
	}
	flagged := &report.TrialSummary{Fidelity: report.Fidelity{CPUSaturated: true}}
	if err := r.afterTrial(context.Background(), p, 1, flagged, map[string]bool{p.Name: true}); err != nil {
		t.Fatalf("a flagged trial of the resumed run: %v", err)
	}
	if ev := r.run.Plan.Events; len(ev) != 1 || !strings.Contains(ev[0].Action, "kept the plan") {
		t.Errorf("plan events %+v, want one that kept the plan", ev)
	}
	if _, err := os.Stat(filepath.Join(r.dir, runFileName)); err != nil {
		t.Errorf("run.json not rewritten with the event: %v", err)
	}

	// With a profile the resumed run re-plans with it.
	prof := testProfile(cost.Costs{HopUS: 15})
	r = &runner{spec: spec, opts: Options{Progress: &progress, Profile: prof}, run: &RunFile{Plan: plan}, dir: t.TempDir()}
	if err := r.planRun(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r.profile != prof {
		t.Errorf("resumed with a profile given: the runner plans with %v", r.profile)
	}
}
