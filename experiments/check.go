package experiments

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/fabric-emu/fabric/emu"
	"github.com/fabric-emu/fabric/internal/units"
)

// CheckOptions shape the throwaway lab and the schedule that CheckTransport
// runs a transport on. The zero value is a 3-host star at 10 Mbit/s with
// neither delay nor loss and 2 s of messages, some 40: a check of the
// contract, not of speed, which an interpreter carries on a busy machine.
type CheckOptions struct {
	Hosts    int           // the star's hosts (default 3)
	Rate     units.Rate    // every link's rate (default 10 Mbit/s)
	Delay    time.Duration // one-way delay on every host's link, switch to host
	Loss     float64       // loss probability on every link, each way
	Duration time.Duration // the schedule's length (default 2 s)
	// Load is each host's offered load as a fraction of its link: every
	// host receives from every other (default 0.3).
	Load float64
	// ReadyTimeout and StopGrace are as a scheme's ready_timeout and
	// stop_grace (0: the runner's).
	ReadyTimeout, StopGrace time.Duration
	// Args are FABRIC_ARGS.
	Args map[string]any
	// Dir is where the trial's files (schedules, logs, records) go; by
	// default a temporary directory, removed when every rule is met.
	Dir       string
	LabPrefix string // default "chk"
	Log       *slog.Logger
}

// A Rule is one rule of the contract and what the check found.
type Rule struct {
	Name   string
	Status RuleStatus
	Detail []string // how it was met, or each way it was broken
}

// RuleStatus is a rule's verdict.
type RuleStatus string

const (
	RuleMet        RuleStatus = "met"
	RuleBroken     RuleStatus = "broken"
	RuleNotChecked RuleStatus = "not checked" // an earlier rule's breach left nothing to check
)

// CheckResult is CheckTransport's verdict on a transport.
type CheckResult struct {
	Command  []string
	Lab      string // the lab it ran on, as a line: "3-host star, 100Mbit/s"
	Messages int
	Rules    []Rule
	// Dir holds the trial's logs and records: CheckOptions.Dir, or the
	// temporary directory kept because a rule was broken ("" otherwise).
	Dir string
}

// Met reports whether the transport met every rule.
func (r *CheckResult) Met() bool {
	for _, rule := range r.Rules {
		if rule.Status != RuleMet {
			return false
		}
	}
	return true
}

// The rules, in the order of a trial.
const (
	ruleReady   = "ready line"
	ruleRuns    = "runs until SIGTERM"
	ruleStops   = "exits 0 on SIGTERM within the grace"
	ruleSchema  = "records schema"
	ruleRecords = "every message recorded once"
)

// checkWorkload is the check's message sizes: from an empty message to
// several hundred packets, across the one-packet boundary (Homa's W2
// has many tiny ones, W4 its megabytes; this has a few of each kind).
const checkWorkload = `# workload: fabric transport check's sizes
# discrete: true
0 0.05
1 0.2
100 0.35
1400 0.5
3000 0.65
20000 0.8
100000 0.93
500000 1
`

// CheckTransport runs argv as every host's transport on a throwaway lab
// against a small schedule, through the runner's own launch, stop and
// records checks, and reports each rule of the contract it meets or
// breaks. The error is for the lab, not the transport: a transport that
// breaks every rule is a result.
func CheckTransport(ctx context.Context, argv []string, o CheckOptions) (*CheckResult, error) {
	if err := emu.RequireRoot(); err != nil {
		return nil, err
	}
	temporary := o.Dir == ""
	if err := o.defaults(); err != nil {
		return nil, err
	}
	spec, err := o.spec(argv)
	if err != nil {
		if temporary {
			os.RemoveAll(o.Dir)
		}
		return nil, err
	}
	p := spec.Points()[0]
	opts := Options{LabPrefix: o.LabPrefix, Log: o.Log}.withDefaults()
	r := &runner{spec: spec, opts: opts, run: &RunFile{Seed: 1}, dir: o.Dir}
	t := &trial{runner: r, point: p, n: 1, dir: filepath.Join(o.Dir, "trial"), scheme: spec.schemeAt(p), seed: TrialSeed(1, p.Traffic, 1)}
	res := &CheckResult{Command: argv, Dir: o.Dir,
		Lab: fmt.Sprintf("%d-host star at %v", o.Hosts, o.Rate)}
	if o.Delay > 0 {
		res.Lab += fmt.Sprintf(", %v switch to host", o.Delay)
	}
	if o.Loss > 0 {
		res.Lab += fmt.Sprintf(", %g %% loss", o.Loss*100)
	}
	err = errors.Join(t.check(ctx, res), t.undo())
	if temporary && (err != nil || res.Met()) {
		res.Dir = ""
		return res, errors.Join(err, os.RemoveAll(o.Dir))
	}
	return res, err
}

// check runs the trial's phases, judging each rule as it comes.
func (t *trial) check(ctx context.Context, res *CheckResult) error {
	err := t.setUp(ctx)
	var tf *transportFailure
	switch {
	case errors.As(err, &tf):
		res.Messages = t.plan.schedule.Len()
		res.add(ruleReady, RuleBroken, err.Error())
		res.add(ruleRuns, RuleNotChecked)
		res.add(ruleStops, RuleNotChecked)
		res.add(ruleSchema, RuleNotChecked)
		res.add(ruleRecords, RuleNotChecked)
		return nil
	case err != nil:
		return err
	}
	res.Messages = t.plan.schedule.Len()
	slowest := time.Duration(0)
	for _, pr := range t.transports {
		slowest = max(slowest, pr.readyAt.Sub(pr.started))
	}
	res.add(ruleReady, RuleMet, fmt.Sprintf("every host within %v of its launch (its allowance: %v)", slowest.Round(time.Millisecond), t.allowance))
	if err := t.sleepUntil(ctx, time.Unix(0, t.startNS)); err != nil {
		return err
	}
	switch err := t.runSchedule(ctx); {
	case errors.As(err, &tf):
		res.add(ruleRuns, RuleBroken, err.Error())
	case err != nil:
		return err
	default:
		res.add(ruleRuns, RuleMet, fmt.Sprintf("through the schedule (%v) and the drain (%v)", t.spec.Duration, t.drain()))
	}
	status, detail := t.judgeStop()
	res.add(ruleStops, status, detail...)
	rc, err := checkRecords(t.dir, t.plan.schedule.Len(), 0)
	if err != nil {
		return err
	}
	res.judgeRecords(t, rc)
	return nil
}

// judgeStop stops the transports and judges how they ended.
func (t *trial) judgeStop() (RuleStatus, []string) {
	term := time.Now()
	errs := t.stopAndJudge()
	if len(errs) == 0 {
		slowest := time.Duration(0)
		for _, pr := range t.transports {
			slowest = max(slowest, pr.exitAt.Sub(term))
		}
		return RuleMet, []string{fmt.Sprintf("every host within %v (the grace: %v)", slowest.Round(time.Millisecond), t.stopGrace())}
	}
	var out []string
	for _, e := range errs {
		out = append(out, "host "+e.host+": "+e.err.Error())
	}
	return RuleBroken, out
}

// judgeRecords judges the records files against the schedule.
func (res *CheckResult) judgeRecords(t *trial, rc *recordsCheck) {
	var schema []string
	for _, p := range rc.problems {
		schema = append(schema, p.msg)
	}
	if len(schema) > 0 {
		res.add(ruleSchema, RuleBroken, schema...)
	} else {
		res.add(ruleSchema, RuleMet, "every line a record of the contract, of a scheduled message")
	}
	var bad []string
	for _, d := range rc.dups {
		bad = append(bad, d.msg)
	}
	sched := t.plan.schedule
	for i := range sched.Len() {
		m := sched.Message(i)
		f, ok := rc.flows[m.ID]
		what := fmt.Sprintf("message %d (%s → %s, %d B, t_ns %d)", m.ID, m.Src, m.Dst, m.Size, m.TimeNS)
		switch {
		case !ok:
			bad = append(bad, what+": no flow record")
		case f.host != m.Dst:
			bad = append(bad, fmt.Sprintf("%s: recorded by %s (%s), not by its receiver", what, f.host, f.at))
		case f.Src != m.Src || f.Dst != m.Dst || f.Size != m.Size:
			bad = append(bad, fmt.Sprintf("%s: the record (%s) says %s → %s, %d B", what, f.at, f.Src, f.Dst, f.Size))
		case f.StartNS != t.startNS+m.TimeNS:
			bad = append(bad, fmt.Sprintf("%s: start_ns is %v off FABRIC_START_NS + t_ns, the scheduled time (%s)", what, time.Duration(f.StartNS-t.startNS-m.TimeNS), f.at))
		case !m.Stream && f.Bytes != m.Size:
			bad = append(bad, fmt.Sprintf("%s: %d of its bytes delivered by SIGTERM (%s)", what, f.Bytes, f.at))
		case f.EndNS < f.StartNS:
			bad = append(bad, fmt.Sprintf("%s: end_ns before start_ns (%s)", what, f.at))
		}
	}
	if len(bad) > 0 {
		res.add(ruleRecords, RuleBroken, bad...)
		return
	}
	res.add(ruleRecords, RuleMet, fmt.Sprintf("%d of %d, each once, whole, by its receiver, from its scheduled time", len(rc.flows), sched.Len()))
}

// add appends a rule's verdict.
func (res *CheckResult) add(name string, s RuleStatus, detail ...string) {
	res.Rules = append(res.Rules, Rule{Name: name, Status: s, Detail: detail})
}

// defaults fills in what o leaves unset, and makes its directory.
func (o *CheckOptions) defaults() error {
	if o.Hosts == 0 {
		o.Hosts = 3
	}
	if o.Rate == 0 {
		o.Rate = 10 * units.Mbit
	}
	if o.Duration == 0 {
		o.Duration = 2 * time.Second
	}
	if o.Load == 0 {
		o.Load = 0.3
	}
	if o.LabPrefix == "" {
		o.LabPrefix = "chk"
	}
	if o.Dir != "" {
		return os.MkdirAll(o.Dir, 0o755)
	}
	var err error
	o.Dir, err = os.MkdirTemp("", "fabric-check-")
	return err
}

// spec is the check's experiment: every host sends to every other, with
// the check's sizes, and argv is the one scheme's transport.
func (o *CheckOptions) spec(argv []string) (*Spec, error) {
	cdf := filepath.Join(o.Dir, "check.cdf")
	if err := os.WriteFile(cdf, []byte(checkWorkload), 0o644); err != nil {
		return nil, err
	}
	quoted := make([]string, len(argv))
	for i, a := range argv {
		quoted[i] = strconv.Quote(a)
	}
	links := fmt.Sprintf("rate: %v", o.Rate)
	if o.Delay > 0 {
		links += fmt.Sprintf(", delay: {down: %v}", o.Delay)
	}
	if o.Loss > 0 {
		links += fmt.Sprintf(", loss: %g", o.Loss)
	}
	scheme := fmt.Sprintf("transport: {command: [%s]}", strings.Join(quoted, ", "))
	if o.ReadyTimeout > 0 {
		scheme += fmt.Sprintf(", ready_timeout: %v", o.ReadyTimeout)
	}
	if o.StopGrace > 0 {
		scheme += fmt.Sprintf(", stop_grace: %v", o.StopGrace)
	}
	if len(o.Args) > 0 {
		args, err := json.Marshal(o.Args)
		if err != nil {
			return nil, err
		}
		scheme += fmt.Sprintf(", args: %s", args)
	}
	text := fmt.Sprintf(`name: check
lab:
  name: check
  topology: {kind: star, hosts: %d}
  links: {%s}
schemes:
  check: {%s}
traffic: {pattern: dynamic, workload: %q, client: all, servers: all, load: %g}
duration: %v
`, o.Hosts, links, scheme, cdf, o.Load, o.Duration)
	// The command is named as on the command line: relative to the
	// working directory, as an experiment's are to its file.
	wd, err := os.Getwd()
	if err != nil {
		return nil, err
	}
	return Parse(filepath.Join(wd, "check.yaml"), []byte(text), "")
}
