package experiments

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fabric-emu/fabric/experiments/cost"
	"github.com/fabric-emu/fabric/results/report"
	"github.com/fabric-emu/fabric/tc/delay"
)

// RunPlan is what a run will cost this machine, predicted before it runs
// from the machine's profile and every point's schedule (run.json's
// plan): per point its scale, messages, busiest port, delay line and
// capture, its share of the cores and the verdict the fidelity monitor
// is predicted to give, and the run's wall-clock time.
type RunPlan struct {
	// Profile names the machine profile the plan priced with.
	Profile string `json:"profile"`
	// Scale is the file's scale: none, auto, a number, or a paper rate.
	Scale string `json:"scale"`
	// PeakLimitPct is, with scale auto, the most a point's predicted
	// busiest window may take (AutoPeakPct).
	PeakLimitPct float64     `json:"peak_limit_pct,omitempty"`
	Points       []PointPlan `json:"points"`
	// WallS is the whole run's predicted wall-clock time, seconds.
	WallS float64 `json:"wall_s"`
	// Notes say what the plan could not price (a transport fabric has
	// no calibrated cost for).
	Notes []string `json:"notes,omitempty"`
	// Events are the times the model was wrong during the run, and what
	// fabric did.
	Events []report.PlanEvent `json:"events,omitempty"`
}

// PointPlan is one point's plan.
type PointPlan struct {
	Point   string `json:"point"`
	Scheme  string `json:"scheme"`
	Traffic string `json:"traffic"`
	// Scale is the s the point runs at (0: the file states none), and Why
	// says, with scale auto, why that one.
	Scale    float64 `json:"scale,omitempty"`
	Why      string  `json:"why,omitempty"`
	Messages int     `json:"messages"`
	// The busiest port, delay line and capture, and their packets a
	// second over their busiest window.
	Port       string  `json:"port,omitempty"`
	PortPPS    float64 `json:"port_pps"`
	Line       string  `json:"line,omitempty"`
	LinePPS    float64 `json:"line_pps,omitempty"`
	Capture    string  `json:"capture,omitempty"`
	CapturePPS float64 `json:"capture_pps,omitempty"`
	// LateP99US is how late the machine's own timer is at the 99th
	// percentile after sleeps as long as the delay loop's between
	// releases (the profile's, idle), and LateLimitUS the lines' limit
	// (delay.LatenessLimit); 0 without lines.
	LateP99US   float64 `json:"late_p99_us,omitempty"`
	LateLimitUS float64 `json:"late_limit_us,omitempty"`
	cost.Prediction
	// Verdict is "faithful" or what the monitor is predicted to flag.
	Verdict string `json:"verdict"`
	// TrialS is one trial's wall-clock time, seconds, and Trials how
	// many the point runs.
	TrialS float64 `json:"trial_s"`
	Trials int     `json:"trials"`
	// Uncalibrated says the point's transport has no calibrated cost:
	// tcp's stands in until its first trial is measured.
	Uncalibrated bool `json:"uncalibrated,omitempty"`
}

// Faithful says whether the plan predicts the monitor passes the point.
func (p PointPlan) Faithful() bool { return p.Verdict == verdictFaithful }

const verdictFaithful = "faithful"

// AutoPeakPct is the most of the cores a point's busiest 100 ms window
// may be predicted to take at the s that scale auto picks. Mininet-HiFi
// asks for 35 % idle CPU in every second (Handigol et al., "Reproducible
// network experiments using container-based emulation", CoNEXT 2012,
// §3.2): 65 % busy over a second. Over 100 ms windows it is the fidelity
// monitor's floor, 80 % busy, divided by one and the model's worst error
// measured on quick runs, a third too low: 60 %.
const AutoPeakPct = 60.0

// loopGapFactor is how far apart, in per-packet costs of its loop, the
// busiest delay line's packets must be at scale auto: twice, so that a
// burst's packets, which fall due a frame apart, do not each wait for
// the one before.
const loopGapFactor = 2.0

// PlanOptions tune Plan.
type PlanOptions struct {
	Profile *cost.Profile
	// Seed is the run's base seed (0: the file's, else 1): the plan draws
	// every point's first trial.
	Seed uint64
	// MaxWall refuses a run predicted to take longer (WallError).
	MaxWall time.Duration
	// learned are costs measured on a user transport's first trial, by
	// its command's name; fixed are the traffic groups whose s a running
	// run has decided (a point that has started keeps it).
	learned map[string]cost.Transport
	fixed   map[string]float64
}

// WallError is a run whose predicted wall-clock time exceeds --max-wall
// at the least s that keeps each point faithful.
type WallError struct {
	Max  time.Duration
	Wall time.Duration
	Plan *RunPlan
}

func (e *WallError) Error() string {
	var scales []string
	seen := map[string]bool{}
	for _, p := range e.Plan.Points {
		if !seen[p.Traffic] {
			seen[p.Traffic] = true
			scales = append(scales, fmt.Sprintf("%s s=%g", p.Traffic, p.Scale))
		}
	}
	return fmt.Sprintf("--max-wall %v: the run is predicted to take %v at the least s that keeps each point faithful (%s); "+
		"run fewer points or trials, or allow more time", e.Max, e.Wall.Round(time.Second), strings.Join(scales, ", "))
}

// Plan predicts what the run of s will cost this machine, point by
// point, without building a lab; with scale auto it picks each traffic
// group's s (every scheme of a point's traffic runs at the same s): the
// least rung of the ladder from the lab's least buildable s at which
// every scheme's predicted busiest window stays at or below AutoPeakPct,
// the busiest delay line's packets are more than loopGapFactor of its
// loop's per-packet cost apart, and the machine's own timer lateness
// after the loop's sleeps stays within the lines' limit (which grows with
// the delays, and so with s).
func (s *Spec) Plan(opts PlanOptions) (*RunPlan, error) {
	if opts.Profile == nil {
		return nil, fmt.Errorf("plan: no machine profile (fabric doctor --calibrate measures one)")
	}
	if opts.Seed == 0 {
		opts.Seed = max(s.Seed, 1)
	}
	rp := &RunPlan{Profile: opts.Profile.String(), Scale: s.Scale.String()}
	if s.Scale != nil && s.Scale.Auto {
		rp.PeakLimitPct = AutoPeakPct
	}
	pl := &planner{spec: s, opts: opts, scaled: map[float64]*Spec{}}
	var order []string
	groups := map[string][]Point{}
	for _, p := range s.Points() {
		if groups[p.Traffic] == nil {
			order = append(order, p.Traffic)
		}
		groups[p.Traffic] = append(groups[p.Traffic], p)
	}
	for _, traffic := range order {
		pts, err := pl.group(groups[traffic])
		if err != nil {
			return nil, err
		}
		rp.Points = append(rp.Points, pts...)
	}
	slices.SortStableFunc(rp.Points, func(a, b PointPlan) int { return s.pointIndex(a.Point) - s.pointIndex(b.Point) })
	for _, p := range rp.Points {
		rp.WallS += p.TrialS * float64(p.Trials)
		if p.Uncalibrated {
			rp.Notes = appendOnce(rp.Notes, fmt.Sprintf("scheme %s: its transport has no calibrated cost; tcp's stands in until its "+
				"first trial is measured, whose CPU per message then prices the rest of the run", p.Scheme))
		}
	}
	if wall := time.Duration(rp.WallS * 1e9); opts.MaxWall > 0 && wall > opts.MaxWall {
		return rp, &WallError{Max: opts.MaxWall, Wall: wall, Plan: rp}
	}
	return rp, nil
}

func appendOnce(list []string, v string) []string {
	if slices.Contains(list, v) {
		return list
	}
	return append(list, v)
}

// pointIndex is the place of the point named name in the sweep.
func (s *Spec) pointIndex(name string) int {
	return slices.IndexFunc(s.Points(), func(p Point) bool { return p.Name == name })
}

// planner prices points, keeping the scaled specs it made.
type planner struct {
	spec   *Spec
	opts   PlanOptions
	scaled map[float64]*Spec
}

// at is the spec at scale f.
func (pl *planner) at(f float64) *Spec {
	if sp := pl.scaled[f]; sp != nil {
		return sp
	}
	sp := pl.spec.scaledBy(f)
	pl.scaled[f] = sp
	return sp
}

// rungs are the scales a traffic group may run at, in order of
// preference.
func (pl *planner) rungs(traffic string) []float64 {
	s := pl.spec
	switch {
	case !s.Scale.PaperScale():
		return []float64{1}
	case pl.opts.fixed[traffic] > 0:
		return []float64{pl.opts.fixed[traffic]}
	case s.Scale.Fixed > 0:
		return []float64{s.Scale.Fixed}
	}
	var out []float64
	for _, f := range Ladder() {
		if f >= s.minScale {
			out = append(out, f)
		}
	}
	return out
}

// group plans one traffic group's points: at its least rung that keeps
// every scheme within the limits under scale auto, else at its one rung.
func (pl *planner) group(pts []Point) ([]PointPlan, error) {
	rungs := pl.rungs(pts[0].Traffic)
	auto := len(rungs) > 1
	var best []PointPlan
	var worstPeak float64
	var rejected []string
	for _, f := range rungs {
		out, err := pl.points(pts, f)
		if err != nil {
			return nil, err
		}
		ok, why := pl.fits(out)
		if !auto || ok {
			if auto {
				for i := range out {
					out[i].Why = autoWhy(rejected, out)
				}
			}
			return out, nil
		}
		rejected = append(rejected, fmt.Sprintf("s = %g: %s", f, why))
		if peak := maxPeak(out); best == nil || peak < worstPeak {
			best, worstPeak = out, peak
		}
	}
	for i := range best {
		best[i].Why = fmt.Sprintf("no s up to %g keeps the predicted busiest window at or below %.0f %%: it runs at the s with the least", MaxScale, AutoPeakPct)
	}
	return best, nil
}

// autoWhy says why scale auto chose a rung: its busiest window, and
// what ruled out the rung below, unless it is the least.
func autoWhy(rejected []string, out []PointPlan) string {
	peak := maxPeak(out)
	if len(rejected) == 0 {
		return fmt.Sprintf("the least s the lab builds at; busiest window %.0f %% of the cores (limit %.0f %%)", peak, AutoPeakPct)
	}
	return fmt.Sprintf("busiest window %.0f %% of the cores (limit %.0f %%); at %s", peak, AutoPeakPct, rejected[len(rejected)-1])
}

func maxPeak(out []PointPlan) float64 {
	peak := 0.0
	for _, p := range out {
		peak = max(peak, p.PeakPct)
	}
	return peak
}

// fits says whether every scheme's plan is within scale auto's limits,
// and if not why.
func (pl *planner) fits(out []PointPlan) (bool, string) {
	c := pl.opts.Profile.Costs
	for _, p := range out {
		if p.PeakPct+c.StealPct > AutoPeakPct {
			return false, fmt.Sprintf("%s's busiest window %.0f %%", p.Scheme, p.PeakPct+c.StealPct)
		}
		if p.LinePPS > 0 && 1e6/p.LinePPS <= loopGapFactor*c.LoopPacketCost() {
			return false, fmt.Sprintf("%s's busiest delay line has a packet every %.1f µs, within %g× its loop's %.1f µs", p.Scheme,
				1e6/p.LinePPS, loopGapFactor, c.LoopPacketCost())
		}
		if p.LateP99US > p.LateLimitUS {
			return false, fmt.Sprintf("the machine's timer, %.0f µs late at p99 after the delay loop's sleeps, exceeds the lines' limit of %.0f µs",
				p.LateP99US, p.LateLimitUS)
		}
	}
	return true, ""
}

// points plans a traffic group's points at scale f.
func (pl *planner) points(pts []Point, f float64) ([]PointPlan, error) {
	sp := pl.at(f)
	sched, err := sp.Schedule(sp.graph, pts[0], TrialSeed(pl.opts.Seed, pts[0].Traffic, 1))
	if err != nil {
		return nil, err
	}
	var out []PointPlan
	for _, p := range pts {
		pp, err := pl.point(sp, p, sched)
		if err != nil {
			return nil, err
		}
		pp.Scale = sp.reportScale(sp.labRateBPS())
		out = append(out, pp)
	}
	return out, nil
}

// point plans one point of a scaled spec.
func (pl *planner) point(sp *Spec, p Point, sched *Schedule) (PointPlan, error) {
	sc := sp.schemeAt(p)
	d, err := sp.demandOf(sp.labFor(sc, p, sp.LabSpec.Name), sc, sched, cpuSampleEvery)
	if err != nil {
		return PointPlan{}, err
	}
	c := pl.opts.Profile.Costs
	tr, calibrated := pl.transportCost(sc)
	pred := c.Predict(cost.Load{Transport: tr, Window: d.window, Windows: d.windows}, pl.opts.Profile.CPUs)
	pp := PointPlan{Point: p.Name, Scheme: p.Scheme, Traffic: p.Traffic, Messages: d.messages,
		Port: d.busiest.port, PortPPS: d.busiest.portPPS, Line: d.busiest.line, LinePPS: d.busiest.linePPS,
		Capture: d.busiest.capture, CapturePPS: d.busiest.capturePPS, Prediction: pred, Uncalibrated: !calibrated,
		TrialS: c.Trial.Seconds(d.nodes) + (sp.Duration + sp.drainTime()).Seconds(), Trials: sp.Trials}
	if d.gap > 0 {
		pp.LateP99US, pp.LateLimitUS = c.LateP99(d.gap), float64(delay.LatenessLimit(d.shortest))/1e3
	}
	pp.Verdict = verdict(pp, c)
	return pp, nil
}

// transportCost is a scheme's transport's costs: calibrated for fabric's
// own, measured on its first trial for a user's, else tcp's standing in.
func (pl *planner) transportCost(sc Scheme) (cost.Transport, bool) {
	name := sc.Transport.Name()
	if sc.Transport.Builtin != "" || sc.Transport.IsTCP() {
		if t, ok := pl.opts.Profile.Costs.Transports[name]; ok {
			return t, true
		}
	}
	if t, ok := pl.opts.learned[name]; ok {
		return t, true
	}
	return pl.opts.Profile.Costs.Transports["tcp"], false
}

// verdict is what the fidelity monitor is predicted to say: the CPU rule
// (idle below its floor in more than its share of windows), and the
// delay lines' (a loop slower per packet than its busiest line's packets
// come falls behind, and every later packet is late; a machine whose own
// timer is later than the lines' limit after the loop's sleeps makes
// them late however light the load).
func verdict(p PointPlan, c cost.Costs) string {
	var flags []string
	if p.Saturated() {
		flags = append(flags, fmt.Sprintf("cpu-saturated (idle below %.0f %% in %.0f %% of windows)", cpuIdleFloor, p.SaturatedPct))
	}
	if p.LinePPS > 0 && 1e6/p.LinePPS <= c.LoopPacketCost() || p.LoopPeakPct > 100 {
		flags = append(flags, fmt.Sprintf("delay-lines (a packet every %.1f µs at the busiest line; the loop needs %.1f µs each)",
			1e6/max(p.LinePPS, 1), c.LoopPacketCost()))
	}
	if p.LateP99US > p.LateLimitUS {
		flags = append(flags, fmt.Sprintf("delay-lines (this machine's timer is %.0f µs late at p99 after the loop's sleeps; limit %.0f µs)",
			p.LateP99US, p.LateLimitUS))
	}
	if len(flags) == 0 {
		return verdictFaithful
	}
	return "flagged: " + strings.Join(flags, "; ")
}

// reportScale is the s a trial of the spec reports: the factor it was
// scaled by, or for a file written at the emulation's scale the paper's
// rate over the bottleneck's, bps (0 when it states none).
func (s *Spec) reportScale(bottleneckBPS float64) float64 {
	if s.Scale.PaperScale() {
		return s.pointScale()
	}
	return s.Scale.Factor(bottleneckBPS)
}
