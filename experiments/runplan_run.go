package experiments

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/fabric-emu/fabric/experiments/cost"
	"github.com/fabric-emu/fabric/results/report"
)

// MachineProfile is this machine's profile: the state directory's when
// it stands for the machine (cost.Profile.Stale), else, with calibrate,
// one measured now (labs named labPrefix…) and kept there. Without one it
// returns nil and why; why also says when it measured one anew.
func MachineProfile(ctx context.Context, calibrate bool, labPrefix string) (*cost.Profile, string, error) {
	path := cost.Path()
	var p *cost.Profile
	var why string
	if _, err := os.Stat(path); err != nil {
		why = "no machine profile at " + path
	} else if p, err = cost.Read(path); err != nil {
		why = err.Error()
	} else {
		why = p.Stale(time.Now(), cost.Here(BuildVersion().String()))
	}
	if why == "" {
		return p, "", nil
	}
	if !calibrate {
		return nil, why, nil
	}
	p, err := Calibrate(ctx, CalibrateOptions{LabPrefix: labPrefix})
	if err != nil {
		return nil, why, fmt.Errorf("calibrating the machine (%s): %w", why, err)
	}
	return p, why + ": measured it anew", p.Write(path)
}

// planRun prices the run before its first trial (or takes the plan of
// the run it resumes) and keeps it in run.json. With scale auto it must
// have a profile; otherwise a run without one has no predictions.
func (r *runner) planRun(ctx context.Context) error {
	resumed := r.run.Plan != nil
	p := r.opts.Profile
	if p == nil {
		var why string
		var err error
		// A resumed run keeps its plan; the profile only re-plans the points
		// not yet run after a flagged trial, so it is not measured anew.
		if p, why, err = MachineProfile(ctx, r.opts.Calibrate && !resumed, r.opts.LabPrefix); err != nil {
			return err
		}
		if why != "" {
			fmt.Fprintf(r.opts.Progress, "machine profile: %s\n", why)
		}
	}
	if resumed {
		r.profile = p // its points keep their s
		return nil
	}
	if p == nil {
		if r.spec.Scale != nil && r.spec.Scale.Auto {
			return fmt.Errorf("scale auto needs this machine's profile: fabric doctor --calibrate measures it")
		}
		return nil
	}
	r.profile = p
	plan, err := r.spec.Plan(PlanOptions{Profile: p, Seed: r.run.Seed, MaxWall: r.opts.MaxWall})
	if err != nil {
		return err
	}
	r.run.Plan = plan
	fmt.Fprintf(r.opts.Progress, "plan: %d points, predicted %s (%s)\n", len(plan.Points),
		time.Duration(plan.WallS*1e9).Round(time.Second), p)
	return r.writeRunFile()
}

// writeRunFile rewrites run.json, with the run's plan.
func (r *runner) writeRunFile() error {
	return writeJSON(filepath.Join(r.dir, runFileName), r.run)
}

// pointPlan is the plan of the point named name, or nil.
func (r *runner) pointPlan(name string) *PointPlan {
	if r.run.Plan == nil {
		return nil
	}
	for i := range r.run.Plan.Points {
		if r.run.Plan.Points[i].Point == name {
			return &r.run.Plan.Points[i]
		}
	}
	return nil
}

// at is the runner for point p: the spec at the point's scale, and its
// prediction.
func (r *runner) at(p Point) *runner {
	c := *r
	c.predicted = nil
	f := r.spec.runnableScale()
	if pp := r.pointPlan(p.Name); pp != nil {
		if r.spec.Scale.PaperScale() && pp.Scale > 0 {
			f = pp.Scale
		}
		c.predicted = &report.Predicted{Scale: pp.Scale, Why: pp.Why, MeanPct: pp.MeanPct, PeakPct: pp.PeakPct,
			SaturatedPct: pp.SaturatedPct, Verdict: pp.Verdict, Uncalibrated: pp.Uncalibrated}
	}
	c.spec = r.spec.scaledBy(f)
	return &c
}

// runnableScale is the least s a spec runs at: its least buildable rung
// for a file written at the paper's scale (or its fixed s), 1 otherwise.
func (s *Spec) runnableScale() float64 {
	switch {
	case !s.Scale.PaperScale():
		return 1
	case s.Scale.Fixed > 0:
		return s.Scale.Fixed
	}
	return max(s.minScale, 1)
}

// afterTrial learns from a trial that ran: a user transport's cost from
// its first trial, and, when the plan predicted the trial faithful and
// the monitor flagged it, the machine again (with opts.Calibrate, once
// per traffic group: a machine that stays busy would be measured after
// every trial) and a new plan for the points not yet begun. done says
// which points have begun.
func (r *runner) afterTrial(ctx context.Context, p Point, n int, t *report.TrialSummary, done map[string]bool) error {
	pp := r.pointPlan(p.Name)
	if pp == nil || t == nil {
		return nil
	}
	replan := false
	if pp.Uncalibrated && r.learnTransport(p, t) {
		replan = true
	}
	var event *report.PlanEvent
	if pp.Faithful() && !t.Fidelity.Faithful() {
		event = &report.PlanEvent{Trial: fmt.Sprintf("%s trial %d", p.Name, n), Flags: t.Fidelity.Flags()}
		switch {
		case r.recalibrated[p.Traffic]:
			event.Action = "re-planned the points not yet run; the machine was measured again after an earlier trial of this traffic"
		case r.opts.Calibrate:
			event.Action = r.recalibrate(ctx, p.Traffic)
		default:
			event.Action = "re-planned the points not yet run with the same costs (this run does not calibrate)"
		}
		replan = true
	}
	if !replan {
		return nil
	}
	var changes []string
	if r.profile == nil {
		// A resumed run whose profile this machine no longer has keeps the
		// plan it was given; only a flag asks (learnTransport needs a
		// profile), so there is an event.
		event.Action = "kept the plan: no machine profile to re-plan with"
	} else {
		var err error
		if changes, err = r.replan(done); err != nil {
			return err
		}
	}
	if event != nil {
		event.Changes = changes
		r.run.Plan.Events = append(r.run.Plan.Events, *event)
		fmt.Fprintf(r.opts.Progress, "        the plan predicted %s faithful: %s\n", event.Trial, event.Action)
	}
	return r.writeRunFile()
}

// replan plans the run again with the runner's profile and what it has
// learned, keeping the s of every traffic group that has begun, and
// returns the points whose s changed.
func (r *runner) replan(done map[string]bool) ([]string, error) {
	old := r.run.Plan
	fixed := map[string]float64{}
	for _, pp := range old.Points {
		if done[pp.Point] && r.spec.Scale.PaperScale() {
			fixed[pp.Traffic] = pp.Scale
		}
	}
	plan, err := r.spec.Plan(PlanOptions{Profile: r.profile, Seed: r.run.Seed, learned: r.learned, fixed: fixed})
	if err != nil {
		return nil, err
	}
	var changes []string
	for i, pp := range plan.Points {
		if done[pp.Point] {
			plan.Points[i] = *r.pointPlanIn(old, pp.Point) // begun: as planned then
			continue
		}
		if was := r.pointPlanIn(old, pp.Point); was != nil && was.Scale != pp.Scale {
			changes = append(changes, fmt.Sprintf("%s: s %g → %g", pp.Point, was.Scale, pp.Scale))
		}
	}
	plan.Events = old.Events
	r.run.Plan = plan
	return changes, nil
}

func (r *runner) pointPlanIn(plan *RunPlan, name string) *PointPlan {
	for i := range plan.Points {
		if plan.Points[i].Point == name {
			return &plan.Points[i]
		}
	}
	return nil
}

// learnTransport prices a user's transport from its first trial: the
// CPU the machine spent beyond what the model prices for the rest of the
// trial (the lab, its ports, lines and captures), per message. It reports
// whether it learned.
func (r *runner) learnTransport(p Point, t *report.TrialSummary) bool {
	name := r.spec.schemeAt(p).Transport.Name()
	if _, ok := r.learned[name]; ok || r.profile == nil {
		return false
	}
	mean, _, ok := t.MeasuredOwn()
	if !ok {
		return false
	}
	sp := r.at(p).spec
	pl := &planner{spec: sp, opts: PlanOptions{Profile: r.profile, Seed: r.run.Seed,
		learned: map[string]cost.Transport{name: {}}}, scaled: map[float64]*Spec{}}
	sched, err := sp.Schedule(sp.graph, p, TrialSeed(r.run.Seed, p.Traffic, 1))
	if err != nil {
		return false
	}
	lab, err := pl.point(sp, p, sched) // the trial with the transport free
	if err != nil || lab.Messages == 0 {
		return false
	}
	span := (sp.Duration + sp.drainTime()).Seconds()
	perMessage := max((mean-lab.MeanPct)/100*span*float64(r.profile.CPUs)*1e6/float64(lab.Messages), 0)
	if r.learned == nil {
		r.learned = map[string]cost.Transport{}
	}
	r.learned[name] = cost.Transport{MessageUS: perMessage}
	fmt.Fprintf(r.opts.Progress, "        transport %s: %.0f µs of CPU per message on its first trial; it prices the rest of the run\n", name, perMessage)
	return true
}

// costChange says how a new profile's main costs differ from the old.
func costChange(old, now *cost.Profile) string {
	if old == nil {
		return "no profile before"
	}
	o, n := old.Costs, now.Costs
	return fmt.Sprintf("hop %.1f → %.1f µs, delay line %.1f → %.1f µs a packet, steal %.1f → %.1f %%",
		o.HopUS, n.HopUS, o.DelayPacketUS, n.DelayPacketUS, o.StealPct, n.StealPct)
}

// recalibrate measures the machine again after a trial of traffic group
// traffic, and says what it did: a calibration that fails leaves the run
// to go on with the costs it had.
func (r *runner) recalibrate(ctx context.Context, traffic string) string {
	if r.recalibrated == nil {
		r.recalibrated = map[string]bool{}
	}
	r.recalibrated[traffic] = true
	prof, err := Calibrate(ctx, CalibrateOptions{LabPrefix: r.opts.LabPrefix})
	if err == nil {
		err = prof.Write(cost.Path())
	}
	if err != nil {
		return fmt.Sprintf("measuring the machine again failed (%v); re-planned the points not yet run with the same costs", err)
	}
	action := "re-calibrated the machine (" + costChange(r.profile, prof) + ") and re-planned the points not yet run"
	r.profile = prof
	return action
}
