package experiments

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fabric-emu/fabric/internal/cpustat"
	"github.com/fabric-emu/fabric/internal/snmp"
	"github.com/fabric-emu/fabric/results/flows"
	"github.com/fabric-emu/fabric/results/report"
	"github.com/fabric-emu/fabric/tc/delay"
)

// A trial flagged for late delay lines says when an idle delay line on the
// machine was already later than the limit, and only then.
func TestAdviceNamesTheMachineFloor(t *testing.T) {
	late := func(floor time.Duration) *report.Fidelity {
		return &report.Fidelity{DelayLines: &report.DelayFidelity{LatenessP99US: 180, LimitUS: 50, Late: true,
			Machine: &delay.MachineTiming{FloorP99: floor}}}
	}
	spec := &Spec{}
	if a := advice(late(120*time.Microsecond), spec); !strings.Contains(a, "timed before the traffic") || !strings.Contains(a, "120 µs") {
		t.Errorf("floor above the limit, advice: %s", a)
	}
	if a := advice(late(30*time.Microsecond), spec); strings.Contains(a, "timed before the traffic") {
		t.Errorf("floor below the limit, advice: %s", a)
	}
}

// A loop that takes longer per packet than a full-size packet's time on
// the link falls behind within bursts; the advice says so, with the rate
// below which it would not, and only then.
func TestAdviceNamesALoopSlowerThanTheLink(t *testing.T) {
	late := func(loopUS float64) *report.Fidelity {
		return &report.Fidelity{DelayLines: &report.DelayFidelity{LatenessP99US: 1000, LimitUS: 500, Late: true,
			LoopCPUPerPacketUS: loopUS, FullFrameUS: 65, FullFrameRateMbps: 186.34}}
	}
	spec := &Spec{}
	// A 1514-byte frame takes 65 µs at 186.34 Mbit/s and 85 µs at 142.
	if a := advice(late(85), spec); !strings.Contains(a, "falls behind within a burst") || !strings.Contains(a, "142 Mbit/s") {
		t.Errorf("loop slower than a frame, advice: %s", a)
	}
	if a := advice(late(50), spec); strings.Contains(a, "falls behind") {
		t.Errorf("loop faster than a frame, advice: %s", a)
	}
}

// The hypervisor's share of the lines' own CPU is read per CPU from
// /proc/stat, and a trial flagged for late lines names it.
func TestAdviceNamesStealOnTheLinesCPU(t *testing.T) {
	if delay.LoopCPU < 0 {
		if got := loopCPUSteal(cpustat.Stat{}, cpustat.Stat{}); got != -1 {
			t.Errorf("lines on any CPU: steal %v, want -1 (unknown)", got)
		}
		return
	}
	cpus := func(steal, total uint64) cpustat.Stat {
		s := cpustat.Stat{CPUs: make([]cpustat.Times, delay.LoopCPU+2)}
		s.CPUs[delay.LoopCPU] = cpustat.Times{Steal: steal, Total: total}
		s.CPUs[delay.LoopCPU+1] = cpustat.Times{Steal: 10 * steal, Total: total} // another CPU's steal is not the lines'
		return s
	}
	if got := loopCPUSteal(cpus(10, 1000), cpus(25, 2000)); got != 1.5 {
		t.Errorf("steal on the lines' CPU %v %%, want 1.5", got)
	}
	if got := loopCPUSteal(cpus(10, 1000), cpus(10, 1000)); got != -1 {
		t.Errorf("no time between the readings: %v, want -1", got)
	}
	f := &report.Fidelity{DelayLines: &report.DelayFidelity{LatenessP99US: 300, LimitUS: 200, Late: true, LoopCPUStealPct: 1.5}}
	if a := advice(f, &Spec{}); !strings.Contains(a, fmt.Sprintf("took 1.50%% of CPU %d, where the lines run", delay.LoopCPU)) {
		t.Errorf("advice: %s", a)
	}
	f.DelayLines.LoopCPUStealPct = -1
	if a := advice(f, &Spec{}); strings.Contains(a, "where the lines run") {
		t.Errorf("unknown steal named: %s", a)
	}
}

// Late lines' advice says when their loop could not run at real time, or
// left it because it was saturated, and says nothing of either otherwise.
func TestAdviceNamesTheLoopsClass(t *testing.T) {
	before := delay.Stats{}
	after := delay.Stats{Realtime: true, Demoted: 1500 * time.Millisecond}
	d := delayFidelity(nil, before, after, delay.Use{}, nil, -1)
	if d.LoopClass != "realtime" || d.DemotedMS != 1500 {
		t.Fatalf("class %q, demoted %v ms; want realtime, 1500", d.LoopClass, d.DemotedMS)
	}
	d.Late = true
	if a := advice(&report.Fidelity{DelayLines: d}, &Spec{}); !strings.Contains(a, "left real-time priority for 1500 ms") || strings.Contains(a, "CAP_SYS_NICE") {
		t.Errorf("advice: %s", a)
	}
	d = delayFidelity(nil, before, delay.Stats{}, delay.Use{}, nil, -1)
	d.Late = true
	if a := advice(&report.Fidelity{DelayLines: d}, &Spec{}); !strings.Contains(a, "CAP_SYS_NICE") || strings.Contains(a, "left real-time") {
		t.Errorf("advice: %s", a)
	}
	d.LoopClass = "" // an older record, which does not say
	if a := advice(&report.Fidelity{DelayLines: d}, &Spec{}); strings.Contains(a, "CAP_SYS_NICE") {
		t.Errorf("advice for a record without a class: %s", a)
	}
}

// The machine's input backlogs' drops are read from softnet_stat (this
// machine has one line per CPU), and any during a trial flags it.
func TestBacklogDrops(t *testing.T) {
	if _, err := snmp.BacklogDrops(); err != nil {
		t.Fatal(err)
	}
	f := &report.Fidelity{BacklogDrops: 615}
	if a := advice(f, &Spec{}); !strings.Contains(a, "615 packets no port or line counted") {
		t.Errorf("advice: %s", a)
	}
	if f.Faithful() {
		t.Error("a trial whose backlogs dropped packets counts as faithful")
	}
	if (report.Fidelity{CaptureDrops: 1}).Faithful() {
		t.Error("a trial whose captures dropped packets counts as faithful")
	}
}

// A run times the idle machine only when one of its labs has delay lines:
// the lab's own links, a scheme's, or a swept delay.
func TestDelayedRuns(t *testing.T) {
	for _, c := range []struct {
		name, links, schemes, sweep string
		want                        bool
	}{
		{"no delay", "{rate: 100Mbit}", "{tcp: {cc: cubic}}", "", false},
		{"the lab's links", "{rate: 100Mbit, delay: {down: 1ms}}", "{tcp: {cc: cubic}}", "", true},
		{"a scheme's links", "{rate: 100Mbit}", "{tcp: {cc: cubic}, far: {cc: cubic, links: {delay: 1ms}}}", "", true},
		{"a swept delay", "{rate: 100Mbit}", "{tcp: {cc: cubic}}", "sweep: {delay: [1ms]}\n", true},
	} {
		spec, err := Parse("d.yaml", fmt.Appendf(nil, `name: d
lab: {name: d, topology: {kind: star, hosts: 3}, links: %s}
schemes: %s
traffic: {pattern: incast, client: h0, servers: rest, senders: 2, size: 10KB}
%sduration: 1s
`, c.links, c.schemes, c.sweep), t.TempDir())
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := spec.delayed(); got != c.want {
			t.Errorf("%s: delayed %v, want %v", c.name, got, c.want)
		}
	}
}

// The hypervisor's share of the CPU is named in a flagged trial's advice
// when it is notable, is no verdict of its own, and reaches the report's
// summary; the monitor measures it on this machine.
func TestAdviceNamesTheHypervisorsShare(t *testing.T) {
	late := func(steal float64) *report.Fidelity {
		return &report.Fidelity{CPUStealPct: steal, DelayLines: &report.DelayFidelity{LatenessP99US: 180, LimitUS: 50, Late: true}}
	}
	if a := advice(late(8.3), &Spec{}); !strings.Contains(a, "hypervisor took 8.3%") {
		t.Errorf("8.3 %% stolen, advice: %s", a)
	}
	if a := advice(late(0.5), &Spec{}); strings.Contains(a, "hypervisor") {
		t.Errorf("0.5 %% stolen, advice: %s", a)
	}
	stolen := &report.Fidelity{CPUStealPct: 30}
	if !stolen.Faithful() || advice(stolen, &Spec{}) != "" {
		t.Error("steal with no open-loop port flags a trial; its harm is judged by the lateness and saturation it causes")
	}
	open := &report.Fidelity{CPUStealPct: 3.9, Ports: []report.PortRate{{Port: "s0:eth0", ConfiguredBPS: 10e6, ExpectedBPS: 9e6}}}
	if a := advice(open, &Spec{}); open.Faithful() || !strings.Contains(a, "load 0.90") || !strings.Contains(a, "up to 39%") || !strings.Contains(a, "run it again") {
		t.Errorf("3.9 %% stolen at an open-loop port at 0.9: faithful %v, advice: %s", open.Faithful(), a)
	}
	if !stolen.NotableSteal() {
		t.Errorf("30 %% stolen is not notable: %+v", stolen)
	}
	m := startCPUMonitor(t.Context(), nil, nil)
	time.Sleep(3 * cpuSampleEvery)
	samples, steal := m.Stop()
	if len(samples) == 0 || steal < 0 || steal > 100 {
		t.Fatalf("monitor: %d samples, %.1f %% stolen", len(samples), steal)
	}
}

// The CPU monitor's samples tile the wall clock the records use, and the
// saturated ones are the stretches a tail is judged against; a tail the
// machine made flags the trial and its advice says how much.
func TestSaturatedSpansAndATailTheMachineMade(t *testing.T) {
	m := startCPUMonitor(t.Context(), nil, nil)
	time.Sleep(5 * cpuSampleEvery)
	samples, steal := m.Stop()
	if len(samples) < 2 || steal < 0 || steal > 100 {
		t.Fatalf("monitor: %d samples, %.1f %% stolen", len(samples), steal)
	}
	// The samples tile the wall clock the records use, one after another,
	// so that the flows in flight during a saturated one can be found.
	now := time.Now().UnixNano()
	for i, smp := range samples {
		if smp.Span.EndNS <= smp.Span.StartNS || smp.Span.EndNS > now || now-smp.Span.StartNS > int64(time.Minute) ||
			(i > 0 && smp.Span.StartNS != samples[i-1].Span.EndNS) {
			t.Fatalf("sample %d spans %+v (the one before: %+v, now %d)", i, smp.Span, samples[max(i-1, 0)].Span, now)
		}
	}
	samples[0].IdlePct, samples[len(samples)-1].IdlePct = 5, 50
	if got := saturatedSpans(samples); len(got) == 0 || got[0] != samples[0].Span || slices.Contains(got, samples[len(samples)-1].Span) {
		t.Fatalf("saturated spans %+v of samples %+v", got, samples)
	}
	tail := &report.Fidelity{CPUTail: []flows.TailExposure{{Group: "all", Flows: 1000, Exposed: 60, Tail: 10, TailExposed: 2},
		{Group: "rpc", Flows: 900, Exposed: 50, Tail: 9, TailExposed: 8}}, CPUTailDistorted: true}
	if tail.Faithful() {
		t.Error("a trial whose tail the machine made is not unfaithful")
	}
	if a := advice(tail, &Spec{}); !strings.Contains(a, "8 of the 9 slowest 1 % of rpc's messages were in flight while the CPU was saturated (50 of all 900 were), below 20% idle") ||
		strings.Contains(a, "of all messages") {
		t.Errorf("advice for a tail the machine made: %s", a)
	}
}
