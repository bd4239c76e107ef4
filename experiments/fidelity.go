package experiments

import (
	"context"
	"encoding/csv"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fabric-emu/fabric/internal/cpustat"
	"github.com/fabric-emu/fabric/results/flows"
	"github.com/fabric-emu/fabric/results/report"
	"github.com/fabric-emu/fabric/tc/delay"
)

// An emulation is only as good as the CPU behind it: when the cores are
// saturated, queues build in the kernel's softirq backlog instead of the
// emulated ports, and every latency is wrong. The fidelity monitor samples
// CPU idle time through every trial and the runner flags the trial.

// Fidelity thresholds: a trial is unfaithful when the CPU had less than
// cpuIdleFloor idle for more than cpuBusyFraction of the samples, the one
// rule that tests' retries judge the CPU by too (cpustat.Saturated).
const (
	cpuSampleEvery  = 100 * time.Millisecond
	cpuIdleFloor    = cpustat.SaturatedIdlePct
	cpuBusyFraction = cpustat.SaturatedShare
)

// cpuSample is how the machine's CPU was spent over one interval.
type cpuSample struct {
	At time.Duration // since the monitor started
	// Span is the interval in CLOCK_REALTIME, the clock of the records,
	// so that flows in flight during it can be found.
	Span    flows.Interval
	IdlePct float64
	// StealPct is the share the hypervisor took (cpustat.Times.Steal).
	StealPct float64
}

// cpuMonitor samples /proc/stat until stopped, and with it where the CPU
// went (cpuAccount).
type cpuMonitor struct {
	mu      sync.Mutex
	samples []cpuSample
	first   cpustat.Times
	last    cpustat.Times
	account *cpuAccount
	stop    context.CancelFunc
	done    chan struct{}
}

// startCPUMonitor begins sampling /proc/stat, and the CPU time of the
// trial's transports and of the LMM's probes running now; watch adds those
// started later.
func startCPUMonitor(ctx context.Context, transports, probes []*proc) *cpuMonitor {
	ctx, cancel := context.WithCancel(ctx)
	m := &cpuMonitor{stop: cancel, done: make(chan struct{})}
	t0 := time.Now()
	prev, err := cpustat.ReadStat()
	if err != nil {
		close(m.done)
		return m
	}
	m.account = newCPUAccount(t0, transports, probes)
	m.first, m.last = prev.Times, prev.Times
	from := time.Now().UnixNano()
	go func() {
		defer close(m.done)
		defer cpustat.Track(cpustat.Sampler)()
		tick := time.NewTicker(cpuSampleEvery)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				if now, err := cpustat.ReadStat(); err == nil {
					m.account.sample(prev, now, time.Since(t0).Seconds(), true)
				}
				m.account.finish()
				return
			case <-tick.C:
			}
			now, err := cpustat.ReadStat()
			if err != nil {
				continue
			}
			share, ok := now.Since(prev.Times)
			if !ok {
				continue
			}
			at := time.Since(t0)
			m.account.sample(prev, now, at.Seconds(), false)
			prev = now
			to := time.Now().UnixNano()
			m.mu.Lock()
			m.samples = append(m.samples, cpuSample{At: at, Span: flows.Interval{StartNS: from, EndNS: to},
				IdlePct: share.IdlePct, StealPct: share.StealPct})
			from = to
			m.last = now.Times
			m.mu.Unlock()
		}
	}()
	return m
}

// watch adds one of the trial's processes to the account: a transport, or
// with probe one of the LMM's probe processes.
func (m *cpuMonitor) watch(pr *proc, probe bool) {
	if m.account != nil {
		m.account.watch(pr, probe)
	}
}

// Stop ends sampling and returns the samples and the share of the CPU
// the hypervisor took over all of them.
func (m *cpuMonitor) Stop() (samples []cpuSample, stealPct float64) {
	m.stop()
	<-m.done
	m.mu.Lock()
	defer m.mu.Unlock()
	share, _ := m.last.Since(m.first)
	return append([]cpuSample(nil), m.samples...), share.StealPct
}

// Account is where the CPU went over the samples (nil when /proc/stat
// could not be read); call it after Stop.
func (m *cpuMonitor) Account() *report.CPUAccount {
	if m.account == nil {
		return nil
	}
	return m.account.account()
}

// cpuVerdict summarises samples: the lowest idle percentage, the fraction
// of samples below the floor, and whether that makes the trial unfaithful.
func cpuVerdict(samples []cpuSample) (minIdle, busyFrac float64, saturated bool) {
	if len(samples) == 0 {
		return 0, 0, false
	}
	minIdle = 100
	busy := 0
	for _, s := range samples {
		minIdle = min(minIdle, s.IdlePct)
		if s.IdlePct < cpuIdleFloor {
			busy++
		}
	}
	busyFrac = float64(busy) / float64(len(samples))
	return minIdle, busyFrac, busyFrac > cpuBusyFraction
}

// saturatedSpans are the samples' intervals with less than cpuIdleFloor
// idle: the moments in which the report looks for a slowdown tail the
// machine made (flows.TailExposure).
func saturatedSpans(samples []cpuSample) []flows.Interval {
	var out []flows.Interval
	for _, s := range samples {
		if s.IdlePct < cpuIdleFloor {
			out = append(out, s.Span)
		}
	}
	return out
}

// writeCPUCSV writes the idle time series for plots and later checks.
func writeCPUCSV(path string, samples []cpuSample) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	w.Write([]string{"seconds", "cpu_idle_pct", "cpu_steal_pct"})
	for _, s := range samples {
		w.Write([]string{strconv.FormatFloat(s.At.Seconds(), 'f', 3, 64), strconv.FormatFloat(s.IdlePct, 'f', 1, 64),
			strconv.FormatFloat(s.StealPct, 'f', 1, 64)})
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// machineSpin is how long a run spins to measure the idle machine
// (delay.MeasureMachine): long enough to see a few hundred stalls on the
// virtual machines here (~450 a second), short against a trial.
const machineSpin = 500 * time.Millisecond

// delayFidelity judges the lines' counters over the traffic phase.
func delayFidelity(lines []delay.Line, before, after delay.Stats, use delay.Use, machine *delay.MachineTiming, loopSteal float64) *report.DelayFidelity {
	d := after.Since(before)
	t := d.Totals()
	shortest, frame, frameRate := time.Duration(1<<63-1), time.Duration(0), 0.0
	for _, l := range lines {
		if l.Delay > 0 {
			shortest = min(shortest, l.Delay)
		}
		if ft := l.FullFrame(); ft > 0 && (frame == 0 || ft < frame) {
			frame, frameRate = ft, l.Rate
		}
	}
	limit := delay.LatenessLimit(0)
	if shortest < time.Duration(1<<63-1) {
		limit = delay.LatenessLimit(shortest)
	}
	us := func(v time.Duration) float64 { return float64(v) / 1e3 }
	f := &report.DelayFidelity{Lines: len(lines), Packets: t.Packets, Lost: t.Lost, Unasked: t.Overflow,
		LatenessP50US: us(d.Lateness(0.5)), LatenessP99US: us(d.Lateness(0.99)), LatenessMaxUS: us(d.MaxLateness()),
		LimitUS: us(limit), FullFrameUS: us(frame), FullFrameRateMbps: frameRate / 1e6, Machine: machine, LoopCPUStealPct: loopSteal}
	f.Late = d.Lateness(0.99) > limit
	f.LoopClass, f.DemotedMS = "normal", us(d.Demoted)/1e3
	if d.Realtime {
		f.LoopClass = "realtime"
	}
	if n := float64(d.Released()); n > 0 {
		f.LoopCPUPerPacketUS = us(use.CPU) / n
		f.VerdictUSPerPacket = us(use.Verdict) / n
		f.TurnsPerPacket = float64(use.Turns) / n
	}
	return f
}

// advice says how to make an unfaithful trial believable.
func advice(f *report.Fidelity, spec *Spec) string {
	var why []string
	if f.CPUSaturated {
		why = append(why, fmt.Sprintf("CPU idle was below %.0f%% in %.0f%% of samples (min %.0f%%)", cpuIdleFloor, 100*f.CPUBusyFrac, f.MinCPUIdlePct))
	}
	for _, e := range f.CPUTail {
		if e.Distorted() {
			why = append(why, fmt.Sprintf("%s, below %.0f%% idle: the machine, not the network, may have made that tail", e, cpuIdleFloor))
		}
	}
	if f.CaptureDrops > 0 {
		why = append(why, fmt.Sprintf("the captures dropped %d packets", f.CaptureDrops))
	}
	if f.BacklogDrops > 0 {
		why = append(why, fmt.Sprintf("the kernel's input backlogs dropped %d packets no port or line counted (net.core.netdev_max_backlog)", f.BacklogDrops))
	}
	if d := f.DelayLines; d != nil && d.Late {
		why = append(why, lateLinesAdvice(d)...)
	}
	if d := f.DelayLines; d != nil && d.Unasked > 0 {
		why = append(why, fmt.Sprintf("the delay lines dropped %d packets nobody asked them to", d.Unasked))
	}
	stolen := f.Stolen()
	if stolen {
		share, load := f.StealHarm()
		why = append(why, fmt.Sprintf("the hypervisor took %.1f%% of this virtual machine's CPU during the traffic (steal) while a port ran open-loop at load %.2f: "+
			"a stall leaves such a port behind for 1/(1 − load) times its length, so up to %.0f%% of its traffic met a port the hypervisor had stopped (limit %.0f%%)",
			f.CPUStealPct, load, 100*share, 100*cpustat.SaturatedShare))
	}
	if len(why) == 0 {
		return ""
	}
	if stolen && len(why) == 1 {
		return why[0] + ": run it again when the hypervisor takes less (fabric doctor measures it), or at a lower load, which the same steal perturbs less"
	}
	if f.NotableSteal() && !stolen {
		why = append(why, fmt.Sprintf("the hypervisor took %.1f%% of this virtual machine's CPU during the traffic (steal), "+
			"which no setting of the lab gives back", f.CPUStealPct))
	}
	if cpuFlagged(f) && f.CPUConsumers != nil && len(f.CPUConsumers.Largest) > 0 {
		return strings.Join(why, " and ") + "; " + consumersAdvice(f, spec)
	}
	how := "lower the emulated link rate (lab links.rate, e.g. 100Mbit instead of 1Gbit)"
	if spec.Traffic.Pattern == "dynamic" {
		how = "lower the offered load (traffic.load / sweep.load) or " + how
	}
	how += ", capture fewer ports (measure.lmm.from), or stop other work on this machine"
	return strings.Join(why, " and ") + ": " + how
}

// lateLinesAdvice says why late delay lines were late, as far as their
// record tells.
func lateLinesAdvice(d *report.DelayFidelity) []string {
	why := []string{fmt.Sprintf("the delay lines released packets %.0f µs late at the 99th percentile (limit %.0f µs)", d.LatenessP99US, d.LimitUS)}
	if d.LoopCPUStealPct > 0 {
		why = append(why, fmt.Sprintf("the hypervisor took %.2f%% of CPU %d, where the lines run (every release due while it runs something else there is late)",
			d.LoopCPUStealPct, delay.LoopCPU))
	}
	if d.LoopClass == "normal" {
		why = append(why, "the lines' loop could not run at real-time priority (fabric needs CAP_SYS_NICE for it), so its wake-ups waited behind other threads on its CPU")
	}
	if d.DemotedMS > 0 {
		why = append(why, fmt.Sprintf("the lines' loop was saturated and left real-time priority for %.0f ms, so that the other threads on its CPU could run", d.DemotedMS))
	}
	if m := d.Machine; m != nil && m.FloorP99.Seconds()*1e6 > d.LimitUS {
		why = append(why, fmt.Sprintf("an idle delay line on this machine, timed before the traffic, was already %.0f µs late at p99 "+
			"(the machine's timer, which a lower load may not help; a lower link rate scales the delays, and with them the limit, up)", m.FloorP99.Seconds()*1e6))
	}
	if d.FullFrameUS > 0 && d.LoopCPUPerPacketUS > d.FullFrameUS {
		// The rate at which a frame takes as long as the loop spends
		// per packet.
		keeps := d.FullFrameRateMbps * d.FullFrameUS / d.LoopCPUPerPacketUS
		why = append(why, fmt.Sprintf("the lines' loop took %.0f µs of CPU per packet, more than a full-size packet's %.0f µs on the fastest delayed link, "+
			"so it falls behind within a burst (links below about %.0f Mbit/s space a burst's packets further apart)", d.LoopCPUPerPacketUS, d.FullFrameUS, keeps))
	}
	return why
}

// loopCPUSteal is the share of the delay lines' CPU the hypervisor took
// between two readings of /proc/stat, in percent, or -1 when the lines
// have no CPU of their own or the readings do not show it.
func loopCPUSteal(before, after cpustat.Stat) float64 {
	c := delay.LoopCPU
	if c < 0 || c >= len(before.CPUs) || c >= len(after.CPUs) {
		return -1
	}
	share, ok := after.CPUs[c].Since(before.CPUs[c])
	if !ok {
		return -1
	}
	return share.StealPct
}
