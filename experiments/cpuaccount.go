package experiments

import (
	"fmt"
	"maps"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fabric-emu/fabric/internal/cpustat"
	"github.com/fabric-emu/fabric/results/report"
)

// cpuAccount says where the CPU went during a trial's traffic, on the CPU
// monitor's clock: at each of its samples it reads, besides /proc/stat,
// fabric's own stat file, the threads of fabric's loops (cpustat.Track)
// and the stat file of each of the trial's processes, and keeps what each
// used since the sample before (report.CPUSample).
type cpuAccount struct {
	mu     sync.Mutex
	procs  []*watchedProc
	fabric uint64
	loops  [cpustat.NumLoops]float64
	others uint64 // the other processes' time at the start (cpustat.ReadOthers)
	out    report.CPUAccount
}

// watchedProc is one of the trial's processes: a transport, or one of the
// LMM's probe processes. last is its time at the latest reading.
type watchedProc struct {
	host  string
	pid   int
	probe bool
	last  uint64
}

// newCPUAccount starts an account from start, the monitor's first
// reading, with the trial's processes running now.
func newCPUAccount(start time.Time, transports, probes []*proc) *cpuAccount {
	a := &cpuAccount{out: report.CPUAccount{CPUs: runtime.NumCPU(), TicksPerSecond: cpustat.TicksPerSecond, StartNS: start.UnixNano(),
		Hosts: map[string]uint64{}}}
	for _, pr := range transports {
		a.watch(pr, false)
	}
	for _, pr := range probes {
		a.watch(pr, true)
	}
	a.others, _ = a.readOthers()
	a.fabric, a.loops = readFabric(), cpustat.LoopTimes()
	return a
}

// skip says whether pid is fabric's own process or one of the trial's,
// which the account has apart from the other processes'.
func (a *cpuAccount) skip(pid int) bool {
	return pid == os.Getpid() || slices.ContainsFunc(a.procs, func(p *watchedProc) bool { return p.pid == pid })
}

// readOthers is what the other processes have used: neither fabric's,
// its helpers' (read once, not once a process) nor the trial's.
func (a *cpuAccount) readOthers() (uint64, error) {
	helpers := cpustat.Helpers()
	return cpustat.ReadOthers(func(pid int) bool { return a.skip(pid) || slices.Contains(helpers, pid) })
}

// finish ends the account with the time the other processes on the
// machine used since it began; the sample it follows must end now.
func (a *cpuAccount) finish() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if now, err := a.readOthers(); err == nil && a.others > 0 {
		others := since(now, a.others)
		a.out.Others = &others
	}
}

// readFabric is fabric's own process's time and its helpers' (the delay
// lines' process), in ticks (its own 0 if unreadable: the account then
// shows the process as unaccounted, never negative).
func readFabric() uint64 {
	t, _ := cpustat.ReadProcess(os.Getpid())
	return t.Own + uint64(cpustat.HelperTime().Seconds()*cpustat.TicksPerSecond)
}

// watch adds one of the trial's processes from now on; probe says it is
// one of the LMM's probes rather than a transport.
func (a *cpuAccount) watch(pr *proc, probe bool) {
	pid := pr.p.PID()
	if pid <= 0 {
		return
	}
	t, err := cpustat.ReadProcess(pid)
	if err != nil {
		return // it has exited already
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.procs = append(a.procs, &watchedProc{host: pr.host, pid: pid, probe: probe, last: t.Own})
}

// sample adds the interval that ends with the monitor's reading now, whose
// reading before was prev; seconds is its end on cpu.csv's clock. With
// extend it lengthens the last sample instead of adding one: the
// monitor's last reading, when it stops, ends the account where finish
// reads the other processes, without a sample too short to judge.
func (a *cpuAccount) sample(prev, now cpustat.Stat, seconds float64, extend bool) {
	fabric, loops := readFabric(), cpustat.LoopTimes()
	a.mu.Lock()
	defer a.mu.Unlock()
	s := report.CPUSample{Seconds: seconds, Total: now.Total - prev.Total, Idle: now.Idle - prev.Idle, Steal: now.Steal - prev.Steal,
		Fabric: since(fabric, a.fabric)}
	for i := range min(len(now.CPUs), len(prev.CPUs)) {
		s.Softirq = append(s.Softirq, now.CPUs[i].Softirq-prev.CPUs[i].Softirq)
	}
	d := func(l cpustat.Loop) float64 { return max(0, loops[l]-a.loops[l]) }
	s.DelayLines, s.Captures, s.Pacers, s.Sampler = d(cpustat.DelayLines), d(cpustat.Captures), d(cpustat.Pacers), d(cpustat.Sampler)
	a.fabric, a.loops = max(fabric, a.fabric), loops
	for _, p := range a.procs {
		t, err := cpustat.ReadProcess(p.pid)
		if err != nil {
			continue // exited: what it used since the last reading is lost
		}
		used := since(t.Own, p.last)
		p.last = max(t.Own, p.last)
		if p.probe {
			s.Probes += used
			continue
		}
		s.Transports += used
		a.out.Hosts[p.host] += used
	}
	if n := len(a.out.Samples); extend && n > 0 {
		a.out.Samples[n-1] = a.out.Samples[n-1].Merged(s)
		return
	}
	a.out.Samples = append(a.out.Samples, s)
}

// since is now − before for cumulative tick counts, 0 if one went back
// (an unreadable stat file read as 0).
func since(now, before uint64) uint64 {
	if now < before {
		return 0
	}
	return now - before
}

// account returns the samples so far.
func (a *cpuAccount) account() *report.CPUAccount {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := a.out
	out.Samples = append([]report.CPUSample(nil), a.out.Samples...)
	out.Hosts = maps.Clone(a.out.Hosts)
	return &out
}

// cpuConsumers finds a trial's largest consumers in its account.
func cpuConsumers(a *report.CPUAccount, samples []cpuSample) *report.CPUConsumers {
	if a == nil || len(a.Samples) != len(samples) {
		return nil
	}
	keep := func(i int) bool { return samples[i].IdlePct < cpuIdleFloor }
	if !slices.ContainsFunc(samples, func(s cpuSample) bool { return s.IdlePct < cpuIdleFloor }) {
		keep = nil
	}
	shares, ok := a.Shares(keep)
	whole, _ := a.Shares(nil)
	if !ok {
		return nil
	}
	c := &report.CPUConsumers{Largest: shares.Largest(3, consumerMinPct)}
	if !math.IsNaN(whole.Others) {
		c.OtherProcessesPct = &whole.Others
	}
	for h, v := range a.Hosts {
		pct := whole.Transports * float64(v) / float64(max(sumHosts(a), 1))
		if c.BusiestHost == nil || pct > c.BusiestHost.Pct || pct == c.BusiestHost.Pct && h < c.BusiestHost.Name {
			c.BusiestHost = &report.CPUPart{Name: h, Pct: pct}
		}
	}
	return c
}

// sumHosts is the transports' time over the traffic, ticks.
func sumHosts(a *report.CPUAccount) uint64 {
	var n uint64
	for _, v := range a.Hosts {
		n += v
	}
	return n
}

// consumerMinPct is the least share of the machine a part must take for
// the advice to name it.
const consumerMinPct = 5.0

// cpuFlagged says whether the trial was flagged for its CPU.
func cpuFlagged(f *report.Fidelity) bool { return f.CPUSaturated || f.CPUTailDistorted }

// consumersAdvice names the largest consumers of the CPU and what would
// take each down.
func consumersAdvice(f *report.Fidelity, spec *Spec) string {
	const rate = "lower the emulated link rate (lab links.rate, e.g. 100Mbit instead of 1Gbit)"
	var named, how []string
	cc := f.CPUConsumers
	for _, c := range cc.Largest {
		text := fmt.Sprintf("%s (%.0f%%)", c.Name, c.Pct)
		var fix string
		switch c.Name {
		case report.PartTransports:
			if h := cc.BusiestHost; h != nil {
				text = fmt.Sprintf("the transports (%.0f%%; %s's the most, %.0f%% over the traffic)", c.Pct, h.Name, h.Pct)
			}
			fix = rate
			if spec.Traffic.Pattern == "dynamic" {
				fix = "lower the offered load (traffic.load / sweep.load)"
			}
		case report.PartDelayLines:
			text, fix = fmt.Sprintf("the delay lines' loop (%.0f%%)", c.Pct), rate
		case report.PartSoftirq:
			text, fix = fmt.Sprintf("the kernel forwarding the lab's packets in softirq (%.0f%%)", c.Pct), rate
		case report.PartCaptures:
			fix = "capture fewer ports (measure.lmm.from)"
		case report.PartPacers:
			text, fix = fmt.Sprintf("the pacers' rate controllers (%.0f%%)", c.Pct), "pace fewer hosts or lengthen hosts.pacer.rate_interval"
		case report.PartSteal:
			text, fix = fmt.Sprintf("the hypervisor (steal, %.0f%%)", c.Pct), "rerun when the host under this virtual machine is quieter: no setting of the lab gives steal back"
		case report.PartUnaccounted:
			text, fix = fmt.Sprintf("work outside the trial (%.0f%% unaccounted", c.Pct), "stop other work on this machine"
			if o := cc.OtherProcessesPct; o != nil {
				text += fmt.Sprintf("; other processes took %.0f%% over the whole traffic", *o)
			}
			text += ")"
		case report.PartOthers:
			text, fix = fmt.Sprintf("other processes on the machine (%.0f%%)", c.Pct), "stop other work on this machine"
		case report.PartSampler:
			text, fix = fmt.Sprintf("fabric's CPU sampler (%.0f%%)", c.Pct), rate
		default: // the rest of fabric's process: its runtime, the runner
			text, fix = fmt.Sprintf("fabric's own process besides its loops (%.0f%%)", c.Pct), rate
		}
		named = append(named, text)
		if !slices.Contains(how, fix) {
			how = append(how, fix)
		}
	}
	return fmt.Sprintf("while the CPU was below %.0f%% idle, the largest shares of the machine's CPU went to %s: %s",
		cpuIdleFloor, joinAnd(named), strings.Join(how, "; "))
}

// joinAnd joins a list as prose: "a", "a and b", "a, b and c".
func joinAnd(items []string) string {
	if len(items) < 2 {
		return strings.Join(items, "")
	}
	return strings.Join(items[:len(items)-1], ", ") + " and " + items[len(items)-1]
}
