package experiments

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fabric-emu/fabric/emu"
	"github.com/fabric-emu/fabric/experiments/cost"
	"github.com/fabric-emu/fabric/internal/cpustat"
	"github.com/fabric-emu/fabric/internal/units"
	"github.com/fabric-emu/fabric/results/capture"
	"github.com/fabric-emu/fabric/tc"
	"github.com/fabric-emu/fabric/tc/delay"
	"github.com/fabric-emu/fabric/tc/pacer"
)

// CalibrateOptions tune Calibrate. The zero value measures for about
// 40 s with labs named cal….
type CalibrateOptions struct {
	// LabPrefix starts the name of every lab it builds (default "cal").
	LabPrefix string
	// Short measures the lab's costs for a fraction of the time and runs
	// no transport: a test's check that calibration works, not a profile
	// to plan with.
	Short bool
	// Progress receives a line per step.
	Progress io.Writer
	Log      *slog.Logger
}

// Calibrate measures what this machine's CPU pays for what a trial does,
// with small throwaway labs that it removes: a packet through a switch
// (the difference between a chain of three switches and one at the same
// packet rate, which cancels the endpoints), a delay line's packet and
// wake-up (two spacings of the same packets solve cost = a·packets +
// b·wake-ups; the verdicts' time is the forwarding), a captured packet,
// a pacer's turn, each built-in transport's message and packet (trials of
// small and of larger messages, their CPU from the trial's account),
// timer lateness after sleeps of 50 µs to 10 ms, and steal. Each cost is
// the machine's busy time less what other processes used, so the costs
// add up to what the fidelity monitor sees.
func Calibrate(ctx context.Context, opts CalibrateOptions) (*cost.Profile, error) {
	if err := emu.RequireRoot(); err != nil {
		return nil, err
	}
	if opts.LabPrefix == "" {
		opts.LabPrefix = "cal"
	}
	if opts.Progress == nil {
		opts.Progress = io.Discard
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	c, attempts := &calibration{opts: opts, phase: calPhase}, calAttempts
	if opts.Short {
		c.phase, attempts = calPhase/5, 1 // a check of the machinery, not a profile to keep
	}
	return leastStolen(attempts, opts.Progress, func() (*cost.Profile, error) { return c.measure(ctx) })
}

// calAttempts is how many times Calibrate measures a machine whose
// hypervisor takes a notable share of it (cpustat.NotableStealPct): what
// it measures then is slow for the hypervisor's sake, and a plan priced
// with it picks too large a scale (hull/table1 at 30 minutes instead of
// 6 from a calibration under 2-13 % steal).
const calAttempts = 3

// leastStolen calls measure until a profile's steal is below
// cpustat.NotableStealPct, at most n times, and returns the least stolen
// one; Profile.Stale names a stolen profile so that the next run measures
// the machine again.
func leastStolen(n int, progress io.Writer, measure func() (*cost.Profile, error)) (*cost.Profile, error) {
	var best *cost.Profile
	for i := 1; i <= n; i++ {
		p, err := measure()
		if err != nil {
			return nil, err
		}
		if best == nil || p.Costs.StealPct < best.Costs.StealPct {
			best = p
		}
		if p.Costs.StealPct < cpustat.NotableStealPct {
			break
		}
		if i < n {
			fmt.Fprintf(progress, "calibrate: the hypervisor took %.1f %% of the CPU (%.0f %% or more slows what is measured); measuring again (%d of %d)\n",
				p.Costs.StealPct, cpustat.NotableStealPct, i+1, n)
		} else {
			fmt.Fprintf(progress, "calibrate: the hypervisor took %.1f %% of the CPU or more in all %d measurements; keeping the least stolen (%.1f %%), which the next run measures again\n",
				cpustat.NotableStealPct, n, best.Costs.StealPct)
		}
	}
	return best, nil
}

// measure is one calibration of the machine.
func (c *calibration) measure(ctx context.Context) (*cost.Profile, error) {
	opts := c.opts
	start := time.Now()
	first := readUse()
	here := cost.Here(BuildVersion().String())
	p := &cost.Profile{Kernel: here.Kernel, CPUModel: here.CPUModel, CPUs: here.CPUs, Fabric: here.Fabric, Date: start.UTC()}
	fmt.Fprintln(opts.Progress, "calibrate: timer lateness")
	rounds := [][]cost.Lateness{c.lateness()}
	if err := c.forwarding(ctx, &p.Costs); err != nil {
		return nil, err
	}
	if !opts.Short {
		rounds = append(rounds, c.lateness())
		var err error
		if p.Costs.Transports, err = c.transports(ctx, &p.Costs); err != nil {
			return nil, err
		}
		fmt.Fprintln(opts.Progress, "calibrate: timer lateness again")
		rounds = append(rounds, c.lateness())
	}
	p.Costs.Lateness = medianLateness(rounds)
	_, steal := readUse().since(first)
	p.Costs.StealPct = steal
	p.TookS = time.Since(start).Seconds()
	return p, nil
}

// calPhase is how long each packet stream of a calibration runs: at the
// rates below, long enough for a few hundred ms of CPU a phase, many
// times the 10 ms tick the kernel counts it in.
const calPhase = 1500 * time.Millisecond

// The streams' rates: calPPS full-size UDP packets a second in bursts of
// calBurst, whose packets come tens of µs apart, or calSpreadPPS one by
// one, far enough apart that each wakes the delay loop (and the CPU the
// released packet is steered to) from idle, and further apart than the
// line's batching window (delay.BatchTolerance of calDelay, 100 µs), so
// that each is a turn of its own.
const (
	calPPS       = 20000
	calBurst     = 20
	calSpreadPPS = 2000
	calDelay     = 10 * time.Millisecond
	calPacerTr   = 200 * time.Microsecond
)

type calibration struct {
	opts  CalibrateOptions
	phase time.Duration
}

// lateness times an idle delay loop's releases after sleeps of 50 µs to
// 10 ms: about a twelfth of a second of each (a tenth of that in a short
// calibration), and at least 60 releases, so that a p99 is not one stray
// wake-up. A calibration takes three such rounds, at its start, middle
// and end (medianLateness).
func (c *calibration) lateness() []cost.Lateness {
	budget := 250 * time.Millisecond / latenessRounds
	if c.opts.Short {
		budget = 25 * time.Millisecond
	}
	var out []cost.Lateness
	for _, sleep := range []time.Duration{50 * time.Microsecond, 200 * time.Microsecond, time.Millisecond, 10 * time.Millisecond} {
		n := min(max(int(budget/sleep), 60), 2000)
		if c.opts.Short {
			n = min(n, 10)
		}
		for _, l := range delay.MeasureLateness([]time.Duration{sleep}, n) {
			out = append(out, cost.Lateness{SleepUS: us(l.Sleep), P50US: us(l.P50), P99US: us(l.P99)})
		}
	}
	return out
}

// latenessRounds is how many times a calibration measures timer lateness.
const latenessRounds = 3

// medianLateness is, per sleep, the round with the median p99 of rounds
// taken at different times: a disturbance of a second or two (another
// process's burst, the hypervisor's) spoils one round's tail, and a plan
// priced with that tail picks a far larger scale than the machine needs.
// Rounds list the same sleeps in the same order.
func medianLateness(rounds [][]cost.Lateness) []cost.Lateness {
	if len(rounds) == 0 {
		return nil
	}
	out := make([]cost.Lateness, len(rounds[0]))
	for i := range out {
		at := make([]cost.Lateness, 0, len(rounds))
		for _, r := range rounds {
			at = append(at, r[i])
		}
		slices.SortFunc(at, func(a, b cost.Lateness) int { return cmp.Compare(a.P99US, b.P99US) })
		out[i] = at[(len(at)-1)/2]
	}
	return out
}

func us(d time.Duration) float64 { return float64(d) / 1e3 }

// calibrationLab is three pairs of hosts at 10 Gbit/s: a0–sa–a1 through one
// switch, b0–sb1–sb2–sb3–b1 through three, and c0–sc–c1 through one switch
// and a delay line after it. Every switch port has the ECN marker's eBPF,
// and the hosts the pacer's parameters.
func calibrationLab(name string) *emu.Spec {
	r := 10 * units.Gbit
	d := calDelay
	s := emu.NewCustom(name)
	for _, h := range []string{"a0", "a1", "b0", "b1", "c0", "c1"} {
		s.AddHost(h)
	}
	for _, sw := range []string{"sa", "sb1", "sb2", "sb3", "sc"} {
		s.AddSwitch(sw)
	}
	rate := emu.LinkRate(r)
	s.AddLink("a0", "sa", rate).AddLink("sa", "a1", rate).
		AddLink("b0", "sb1", rate).AddLink("sb1", "sb2", rate).AddLink("sb2", "sb3", rate).AddLink("sb3", "b1", rate).
		AddLink("c0", "sc", rate).AddLink("sc", "c1", rate, func(_ *emu.Spec, l *emu.CustomLink) { l.Delay = &emu.Delay{Up: &d} })
	s.Ports = tc.SwitchPorts{PortSettings: tc.PortSettings{Marking: &tc.MarkingSpec{ECN: &tc.ECNSpec{Threshold: 30 * units.KB}}}}
	off := false
	s.Hosts.Pacer = &emu.PacerSpec{Enabled: &off, Config: pacer.Config{RateInterval: calPacerTr}}
	return s
}

// forwarding measures, on the calibration lab, the costs of a switch hop,
// a delay line, a captured packet and a pacer's turn, what the lab costs
// at rest, and how long a node takes to build and remove.
func (c *calibration) forwarding(ctx context.Context, out *cost.Costs) (err error) {
	name := fmt.Sprintf("%s%d-f", c.opts.LabPrefix, os.Getpid()%100000)
	fmt.Fprintf(c.opts.Progress, "calibrate: lab %s (switch hops, a delay line, a capture, pacers)\n", name)
	t0 := time.Now()
	lab, err := emu.Up(ctx, calibrationLab(name))
	if err != nil {
		return err
	}
	up := time.Since(t0)
	defer func() {
		t1 := time.Now()
		err = errors.Join(err, lab.Down(context.WithoutCancel(ctx)))
		out.Trial.NodeS = (up + time.Since(t1)).Seconds() / float64(len(lab.Graph.Nodes)+1) // and the delay namespace
	}()
	m := &labMeasure{c: c, lab: lab}
	time.Sleep(c.phase / 5) // the bring-up's last work settles
	rest := m.idle(c.phase / 2)
	out.RestPct = 100 * rest / (c.phase / 2).Seconds() / float64(runtime.NumCPU()) / 1e9
	a, err := m.stream(ctx, "a0", "a1", calPPS, calBurst, nil)
	if err != nil {
		return err
	}
	b, err := m.stream(ctx, "b0", "b1", calPPS, calBurst, nil)
	if err != nil {
		return err
	}
	// Two switches more. Forwarding runs mostly in the sending system
	// call, in this process, whose time is exact: a machine figure below
	// it had too much taken out for other processes.
	self := (b.selfNS/float64(max(b.packets, 1)) - a.selfNS/float64(max(a.packets, 1))) / 1e3
	out.HopUS = max((b.perPacket()-a.perPacket())/2, self/2, 0.01)
	if err := m.delayLine(ctx, a, out); err != nil {
		return err
	}
	if err := m.capture(ctx, a, out); err != nil {
		return err
	}
	return m.pacers(ctx, out)
}

// labMeasure runs the calibration's phases on its lab.
type labMeasure struct {
	c   *calibration
	lab *emu.Lab
}

// idle is the machine's CPU (ns) over d with nothing sent.
func (m *labMeasure) idle(d time.Duration) float64 {
	before := readUse()
	time.Sleep(d)
	busy, _ := readUse().since(before)
	return busy
}

// phaseUse is one stream's packets and the CPU they cost: the machine's
// (ns), and the delay loop's parts when it runs.
type phaseUse struct {
	packets        uint64
	busyNS, selfNS float64
	loopNS, verdNS float64
	turns          uint64
}

func (u phaseUse) perPacket() float64 { return u.busyNS / float64(max(u.packets, 1)) / 1e3 }

// stream sends full-size UDP packets from one host to another for a
// phase, pps a second in bursts of burst, and measures what they cost;
// during, when set, runs alongside.
func (m *labMeasure) stream(ctx context.Context, from, to string, pps float64, burst int, during func() error) (phaseUse, error) {
	s, err := openStream(m.lab, from, to)
	if err != nil {
		return phaseUse{}, err
	}
	defer s.close()
	var u phaseUse
	w := m.lab.DelayLoop()
	var use0 delay.Use
	if w != nil {
		use0, _ = w.Use()
	}
	before := readUse()
	u.packets = s.send(ctx, pps, burst, m.c.phase)
	time.Sleep(calDelay * 2) // the line releases what it holds
	if during != nil {
		if err := during(); err != nil {
			return u, err
		}
	}
	after := readUse()
	u.busyNS, _ = after.since(before)
	u.selfNS = after.selfSince(before)
	if w != nil {
		use1, _ := w.Use()
		d := use1.Since(use0)
		u.loopNS, u.verdNS, u.turns = float64(d.CPU), float64(d.Verdict), d.Turns
	}
	m.c.opts.Log.Debug("calibrate: stream", "from", from, "to", to, "pps", pps, "burst", burst, "packets", u.packets, "received", s.received.Load(),
		"busy_ms", u.busyNS/1e6, "loop_ms", u.loopNS/1e6, "verdict_ms", u.verdNS/1e6, "turns", u.turns)
	return u, ctx.Err()
}

// delayLine measures the delay line's costs from the same line's packets
// close together (bursts) and far apart: the loop's time less its
// verdicts' is a·packets + b·turns (the loop counts its turns), and so is
// the machine's extra time over the same streams without the line, which
// has the kernel's queueing and the wake-ups of the CPU the released
// packets are steered to besides.
func (m *labMeasure) delayLine(ctx context.Context, plain phaseUse, out *cost.Costs) error {
	burst, err := m.stream(ctx, "c0", "c1", calPPS, calBurst, nil)
	if err != nil {
		return err
	}
	spread, err := m.stream(ctx, "c0", "c1", calSpreadPPS, 1, nil)
	if err != nil {
		return err
	}
	plainSpread, err := m.stream(ctx, "a0", "a1", calSpreadPPS, 1, nil)
	if err != nil {
		return err
	}
	a, b := solve2(float64(burst.packets), float64(burst.turns), burst.loopNS-burst.verdNS,
		float64(spread.packets), float64(spread.turns), spread.loopNS-spread.verdNS)
	out.LoopPacketUS, out.LoopTurnUS = a/1e3, b/1e3
	out.VerdictUS = (burst.verdNS + spread.verdNS) / float64(max(burst.packets+spread.packets, 1)) / 1e3
	extra := func(with, without phaseUse) float64 {
		return with.busyNS - without.busyNS*float64(with.packets)/float64(max(without.packets, 1))
	}
	a, b = solve2(float64(burst.packets), float64(burst.turns), extra(burst, plain), float64(spread.packets), float64(spread.turns), extra(spread, plainSpread))
	out.DelayPacketUS = max(a/1e3, out.LoopPacketUS+out.VerdictUS)
	out.DelayTurnUS = max(b/1e3, out.LoopTurnUS)
	return nil
}

// capture measures a captured packet: the stream through one switch again,
// captured leaving the switch, against the same stream uncaptured.
func (m *labMeasure) capture(ctx context.Context, plain phaseUse, out *cost.Costs) error {
	ns, err := m.lab.NetNS("sa")
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "fabric-calibrate-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	o := capture.Options{Filter: capture.Filter{IPv4Only: true, Direction: capture.Out}}
	s, err := capture.Start(ctx, capture.Point{NetNS: ns, Ifname: "eth1", Label: "sa:eth1"}, dir, o)
	if err != nil {
		return err
	}
	loops0 := cpustat.LoopTimes()
	var st capture.Stats
	u, err := m.stream(ctx, "a0", "a1", calPPS, calBurst, func() error {
		var err error
		st, err = s.Stop()
		return err
	})
	if err != nil {
		return err
	}
	n := float64(max(st.KernelPackets, 1))
	loop := float64(cpustat.LoopTimes()[cpustat.Captures]-loops0[cpustat.Captures]) * 1e9 / cpustat.TicksPerSecond
	extra := u.busyNS - plain.busyNS*float64(u.packets)/float64(max(plain.packets, 1))
	out.CaptureUS = max(extra, loop) / n / 1e3
	return nil
}

// pacers measures a pacer's turn: four idle pacers for a phase, 20,000
// turns a second, so that a turn seldom finds this process's threads
// parked, as in a trial that paces its senders. The pacers run in this
// process, whose time is exact; what it uses at rest is taken out.
func (m *labMeasure) pacers(ctx context.Context, out *cost.Costs) error {
	d := m.c.phase / 2
	before := readUse()
	time.Sleep(d)
	rest := readUse().selfSince(before)
	if err := m.lab.StartPacers(ctx, []string{"a0", "a1", "b0", "c0"}); err != nil {
		return err
	}
	defer m.lab.StopPacers()
	turns := func() (n uint64) {
		for _, p := range m.lab.Pacers() {
			if st, err := p.Stats(); err == nil {
				n += st.Updates
			}
		}
		return n
	}
	t0, loop0 := turns(), cpustat.LoopTimes()[cpustat.Pacers]
	before = readUse()
	time.Sleep(d)
	busy := readUse().selfSince(before)
	n := turns() - t0
	// The process's time less its time at rest is the machine's whole cost
	// of the turns, but the difference of two noisy totals can come out
	// below the loop thread's own time, which a turn costs at least.
	loop := (cpustat.LoopTimes()[cpustat.Pacers] - loop0) * 1e9 / cpustat.TicksPerSecond
	out.PacerTurnUS = max(busy-rest, loop) / float64(max(n, 1)) / 1e3
	return nil
}

// use is a reading of the machine's CPU: /proc/stat, every other
// process's time, and this process's and its helpers' to the microsecond.
type use struct {
	at     time.Time
	stat   cpustat.Times
	others uint64
	self   time.Duration
}

func readUse() use {
	u := use{at: time.Now()}
	u.stat, _ = cpustat.Read()
	self, helpers := os.Getpid(), cpustat.Helpers()
	u.others, _ = cpustat.ReadOthers(func(pid int) bool { return pid == self || slices.Contains(helpers, pid) })
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) == nil {
		u.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	u.self += cpustat.HelperTime() // the delay lines' process is fabric's too
	return u
}

// selfSince is this process's CPU time between b and u, ns: exact, and
// blind to other processes, but not to the kernel's work outside it.
func (u use) selfSince(b use) float64 { return float64(u.self - b.self) }

// since is the CPU the machine was busy between b and u, ns, less steal
// and what other processes used (this process's and the kernel's work),
// and the share of the cores steal took, percent. Busy is wall-clock time
// times the cores less idle, as the CPU account's shares are.
func (u use) since(b use) (busyNS, stealPct float64) {
	wall := u.at.Sub(b.at).Seconds() * float64(runtime.NumCPU()) * cpustat.TicksPerSecond
	idle, steal := float64(u.stat.Idle-b.stat.Idle), float64(u.stat.Steal-b.stat.Steal)
	others := float64(since(u.others, b.others))
	busy := max(wall-idle-steal-others, 0)
	return busy * 1e9 / cpustat.TicksPerSecond, 100 * steal / max(wall, 1)
}

// udpStream is a stream of UDP packets between two hosts of a lab, sent
// and received by this process.
type udpStream struct {
	tx, rx   int
	stop     atomic.Bool
	done     chan struct{}
	received atomic.Uint64
}

// calPort is the calibration streams' UDP port.
const calPort = 5999

// openStream opens the sending socket in from's namespace, connected to
// to's address, and a receiver in to's, which this process drains.
func openStream(lab *emu.Lab, from, to string) (*udpStream, error) {
	s := &udpStream{tx: -1, rx: -1, done: make(chan struct{})}
	dst := lab.Graph.Node(to).Addr.As4()
	err := lab.Do(to, func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		s.rx = fd
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 8<<20)
		tv := unix.NsecToTimeval(int64(50 * time.Millisecond))
		unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
		return unix.Bind(fd, &unix.SockaddrInet4{Port: calPort})
	})
	if err == nil {
		err = lab.Do(from, func() error {
			fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				return err
			}
			s.tx = fd
			return unix.Connect(fd, &unix.SockaddrInet4{Port: calPort, Addr: dst})
		})
	}
	if err != nil {
		s.closeFDs()
		return nil, fmt.Errorf("calibrate: stream %s → %s: %w", from, to, err)
	}
	go s.drain()
	return s, nil
}

func (s *udpStream) drain() {
	defer close(s.done)
	buf := make([]byte, 2048)
	for !s.stop.Load() {
		if n, err := unix.Read(s.rx, buf); err == nil && n > 0 {
			s.received.Add(1)
		}
	}
}

// calPayload makes each packet 1500 bytes of IP: 1472 of UDP payload.
const calPayload = 1472

// send sends pps packets a second in bursts of burst for d, catching up
// when a sleep overshoots, and returns how many it sent.
func (s *udpStream) send(ctx context.Context, pps float64, burst int, d time.Duration) (sent uint64) {
	buf := make([]byte, calPayload)
	gap := time.Duration(float64(burst) / pps * 1e9)
	start := time.Now()
	for next := start; time.Since(start) < d && ctx.Err() == nil; next = next.Add(gap) {
		time.Sleep(time.Until(next))
		for range burst {
			if _, err := unix.Write(s.tx, buf); err == nil {
				sent++
			}
		}
	}
	return sent
}

func (s *udpStream) close() {
	s.stop.Store(true)
	<-s.done
	s.closeFDs()
}

func (s *udpStream) closeFDs() {
	for _, fd := range []int{s.tx, s.rx} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}
