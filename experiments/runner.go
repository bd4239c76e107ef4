package experiments

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fabric-emu/fabric/emu"

	"golang.org/x/sys/unix"

	"github.com/fabric-emu/fabric/experiments/cost"
	"github.com/fabric-emu/fabric/experiments/paper"
	"github.com/fabric-emu/fabric/internal/features"
	"github.com/fabric-emu/fabric/internal/machine"
	"github.com/fabric-emu/fabric/results/report"
	"github.com/fabric-emu/fabric/tc/delay"
)

// Options tune Run. The zero value writes under runs/ with a seed from
// the experiment file (or the clock) and no progress output.
type Options struct {
	// Out is the directory runs go under (default "runs"): a run is
	// Out/NAME/TIMESTAMP.
	Out string
	// Resume is an existing run directory to complete: trials with a
	// complete marker are kept, the rest run again with the run's seed.
	Resume string
	// Seed is the base seed; 0 means the file's seed, else the clock's.
	Seed uint64
	// LabPrefix starts every lab name (default "run"); tests set their own.
	LabPrefix string
	// Progress receives one line per trial: point i/n, elapsed, ETA.
	Progress io.Writer
	// KeepPcaps keeps the captures after the LMM has matched them.
	KeepPcaps bool
	Log       *slog.Logger
	// Profile is the machine profile the run plans with (RunPlan); nil
	// takes the state directory's when it stands for this machine.
	// Calibrate measures one when there is none such, and again when a
	// trial the plan predicted faithful is flagged. MaxWall refuses a run
	// predicted to take longer (WallError).
	Profile   *cost.Profile
	Calibrate bool
	MaxWall   time.Duration
}

// withDefaults fills in what the zero Options leave unset.
func (opts Options) withDefaults() Options {
	if opts.Out == "" {
		opts.Out = "runs"
	}
	if opts.LabPrefix == "" {
		opts.LabPrefix = "run"
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.Progress == nil {
		opts.Progress = io.Discard
	}
	return opts
}

// Result is a finished (or interrupted) run.
type Result struct {
	Dir        string
	Seed       uint64
	Points     []Point
	Trials     []*report.TrialSummary
	Report     *report.Report
	Paper      *paper.Comparison // nil when the experiment names no paper table
	Unfaithful int
	Skipped    int // trials already complete (--resume)
	SetAside   int // flagged runs set aside and run again (Spec.Reruns)
	// Failed are the trials that did not complete, with their reasons.
	Failed  []report.Failure
	Elapsed time.Duration
}

// RunFile is run.json at the top of a run directory: what resume needs.
type RunFile struct {
	Name     string           `json:"name"`
	File     string           `json:"file"`
	Quick    bool             `json:"quick"`
	Seed     uint64           `json:"seed"`
	Started  time.Time        `json:"started"`
	Points   []Point          `json:"points"`
	Trials   int              `json:"trials"`
	Duration string           `json:"duration"`
	Paper    string           `json:"paper,omitempty"`
	Fabric   Version          `json:"fabric"`
	Kernel   string           `json:"kernel"`
	Machine  machine.Machine  `json:"machine"`
	Doctor   *features.Report `json:"doctor,omitempty"`
	Spec     json.RawMessage  `json:"spec"`
	// Plan is what the run was predicted to cost, per point, and when
	// the prediction was wrong (none without a machine profile).
	Plan *RunPlan `json:"plan,omitempty"`
}

// Version is the fabric build that ran.
type Version struct {
	Module  string `json:"module"`
	Version string `json:"version"`
	Commit  string `json:"commit,omitempty"`
	// CommitFrom says where Commit came from: the binary's build stamp, or
	// git in the working directory when the binary has none.
	CommitFrom string `json:"commit_from,omitempty"`
	Modified   bool   `json:"modified,omitempty"`
	Go         string `json:"go"`
	// Binary is the SHA-256 of the fabric executable: the build itself,
	// whatever the directory it runs in says of commits.
	Binary string `json:"binary,omitempty"`
}

// Same reports whether v and o are one build: the same executable when
// both know theirs, else the same version and commit.
func (v Version) Same(o Version) bool {
	if v.Binary != "" && o.Binary != "" {
		return v.Binary == o.Binary
	}
	return v.String() == o.String()
}

// binaryDigest is the running executable's SHA-256, read once.
var binaryDigest = sync.OnceValue(func() string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	sum, err := fileSHA256(exe)
	if err != nil {
		return ""
	}
	return sum
})

// ModulePath is fabric's module path, as go.mod declares it.
const ModulePath = "github.com/fabric-emu/fabric"

// BuildVersion reads the module version and VCS commit from the binary.
func BuildVersion() Version {
	v := Version{Module: ModulePath, Version: "(devel)", Binary: binaryDigest()}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	v.Go = bi.GoVersion
	if bi.Main.Version != "" {
		v.Version = bi.Main.Version
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Commit, v.CommitFrom = s.Value, "build"
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	if v.Commit == "" {
		v.Commit, v.Modified = gitCommit()
		if v.Commit != "" {
			v.CommitFrom = "git (working directory)"
		}
	}
	return v
}

// gitCommit is the fallback when the binary carries no VCS stamp (built
// with -buildvcs=false, or a test binary): the commit of the fabric checkout
// the run is started from, if it is one.
func gitCommit() (commit string, modified bool) {
	root, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return "", false
	}
	gomod, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(root)), "go.mod"))
	if err != nil || !strings.HasPrefix(string(gomod), "module "+ModulePath+"\n") {
		return "", false
	}
	out, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		return "", false
	}
	status, _ := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output()
	return strings.TrimSpace(string(out)), len(status) > 0
}

func kernelRelease() string {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}

// Markers in a trial directory.
const (
	completeMarker   = "COMPLETE"
	incompleteMarker = report.IncompleteFile
	runFileName      = "run.json"
)

// ErrInterrupted is returned (wrapped) when ctx ended mid-run.
var ErrInterrupted = errors.New("run interrupted")

// ErrTrialsFailed is returned (wrapped, with each failure's message) when
// trials of a run failed: the run went on without them, and its report
// lists them under Failed.
var ErrTrialsFailed = errors.New("trials failed")

var labSeq atomic.Int64

// failuresInARow is how many of a scheme's points in a row must fail
// before the run stops running that scheme.
const failuresInARow = 2

// Run runs every point and trial of spec and writes the run directory. A
// trial that fails is marked incomplete with its reason, and so are the
// rest of its point's trials, which are not run; the run goes on with the
// other points, except those of a scheme that failed on failuresInARow
// points in a row. The report lists what failed, and the error then wraps
// ErrTrialsFailed. On ctx's end it tears the current lab down, marks the
// current trial incomplete and returns an error wrapping ErrInterrupted;
// Options.Resume completes the run later.
func Run(ctx context.Context, spec *Spec, opts Options) (*Result, error) {
	opts = opts.withDefaults()
	if err := emu.RequireRoot(); err != nil {
		return nil, err
	}
	res := &Result{Points: spec.Points()}
	rf, err := prepareRunDir(ctx, spec, opts, res)
	if err != nil {
		return nil, err
	}
	res.Seed = rf.Seed
	r := newRunner(spec, opts, rf, res.Dir)
	if err := r.planRun(ctx); err != nil {
		if opts.Resume == "" { // refused before its first trial: nothing is left
			os.RemoveAll(res.Dir)
			res.Dir = ""
		}
		return res, err
	}
	sw := &sweepRun{runner: r, res: res, start: time.Now(), total: len(res.Points) * spec.Trials,
		failedPoints: map[string][]string{}, begun: map[string]bool{}}
	for pi, p := range res.Points {
		if err := sw.point(ctx, pi, p); err != nil {
			return res, err
		}
	}
	res.Elapsed = time.Since(sw.start)
	if err := Finish(res); err != nil {
		return res, err
	}
	if len(sw.failures) > 0 {
		return res, fmt.Errorf("%w: %d trial(s), listed under Failed in %s:\n%s", ErrTrialsFailed, len(sw.failures),
			filepath.Join(res.Dir, "report.md"), strings.Join(sw.failures, "\n"))
	}
	return res, nil
}

// sweepRun is Run's progress through the points.
type sweepRun struct {
	*runner
	res          *Result
	start        time.Time
	total, done  int
	ran          int
	ranFor       time.Duration
	failures     []string
	failedPoints map[string][]string // per scheme, the points it failed on in a row
	begun        map[string]bool     // points with a trial started: their scale stays
}

// point runs the trials of point pi, p, that are not complete yet; once
// one fails, or when p's scheme failed on its last failuresInARow points,
// the rest are marked incomplete, unrun. Only an interruption is an error.
func (sw *sweepRun) point(ctx context.Context, pi int, p Point) error {
	spec, progress := sw.spec, sw.opts.Progress
	notRun, failed := "", false
	if f := sw.failedPoints[p.Scheme]; len(f) >= failuresInARow {
		notRun = fmt.Sprintf("not run: scheme %s failed on %s in a row", p.Scheme, strings.Join(f, " and "))
	}
	for n := 1; n <= spec.Trials; n++ {
		sw.done++
		switch {
		case sw.complete(p, n):
			sw.res.Skipped++
			fmt.Fprintf(progress, "[%d/%d] %s trial %d: complete, skipped\n", sw.done, sw.total, p.Name, n)
			continue
		case notRun != "":
			markIncomplete(sw.trialDir(p, n), errors.New(notRun))
			fmt.Fprintf(progress, "[%d/%d] %s trial %d: %s\n", sw.done, sw.total, p.Name, n, notRun)
			continue
		}
		eta := (time.Duration(sw.total-sw.done+1) * (spec.Duration + 3*time.Second)).Round(time.Second).String() + " (estimated)"
		if sw.ran > 0 {
			eta = (sw.ranFor / time.Duration(sw.ran) * time.Duration(sw.total-sw.done+1)).Round(time.Second).String()
		}
		fmt.Fprintf(progress, "[%d/%d] point %d/%d %s, trial %d/%d  elapsed %s  ETA %s\n", sw.done, sw.total,
			pi+1, len(sw.res.Points), p.Name, n, spec.Trials, time.Since(sw.start).Round(time.Second), eta)
		t0 := time.Now()
		sw.begun[p.Name] = true
		t, _, err := sw.at(p).settleTrial(ctx, p, n)
		sw.ran++
		sw.ranFor += time.Since(t0)
		switch {
		case errors.Is(err, ErrInterrupted) || ctx.Err() != nil:
			return err
		case err != nil:
			fmt.Fprintf(progress, "        FAILED: %v\n", err)
			sw.failures = append(sw.failures, err.Error())
			notRun, failed = fmt.Sprintf("not run: trial %d of point %s failed", n, p.Name), true
		default:
			if err := sw.afterTrial(ctx, p, n, t, sw.begun); err != nil {
				return err
			}
		}
	}
	switch {
	case failed:
		sw.failedPoints[p.Scheme] = append(sw.failedPoints[p.Scheme], p.Name)
	case notRun == "":
		delete(sw.failedPoints, p.Scheme)
	}
	return nil
}

// newRunner is what every trial of a run shares. When the run's labs
// have delay lines it times an idle one on this machine first, before any
// lab exists (a lab's setup, still running just after it came up, would
// make the machine look slower than it is), so that a trial flagged for
// lateness says how much of it was the machine's.
func newRunner(spec *Spec, opts Options, rf *RunFile, dir string) *runner {
	r := &runner{spec: spec, opts: opts, run: rf, dir: dir}
	if spec.scaledBy(spec.runnableScale()).delayed() {
		m := delay.MeasureMachine(machineSpin)
		r.machine = &m
	}
	return r
}

// trialDir is where trial n of p is written.
func (r *runner) trialDir(p Point, n int) string {
	return filepath.Join(r.dir, p.Name, fmt.Sprintf("trial-%d", n))
}

// complete reports whether trial n of p finished in an earlier run of
// this directory (--resume keeps it).
func (r *runner) complete(p Point, n int) bool {
	_, err := os.Stat(filepath.Join(r.trialDir(p, n), completeMarker))
	return err == nil
}

// runTrial runs trial n of p afresh, marking it incomplete if it fails,
// and returns it as the report reads it; an interruption's error wraps
// ErrInterrupted and says how to resume.
func (r *runner) runTrial(ctx context.Context, p Point, n int) (*report.TrialSummary, error) {
	dir := r.trialDir(p, n)
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	fid, sum, err := r.trial(ctx, p, n, dir)
	if err != nil {
		markIncomplete(dir, err)
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w at point %s trial %d (resume with --resume %s): %v", ErrInterrupted, p.Name, n, r.dir, ctx.Err())
		}
		return nil, fmt.Errorf("point %s trial %d: %w", p.Name, n, err)
	}
	if !fid.Faithful() {
		fmt.Fprintf(r.opts.Progress, "        UNFAITHFUL: %s\n", fid.Advice)
	}
	return sum, nil
}

// settleTrial runs trial n of p unless an earlier run of the directory
// completed it, then, while the fidelity monitor flags it and the spec's
// reruns allow, sets the flagged run aside and runs the trial again with
// its seed (the same messages: a rerun, not a new draw, so what the trial
// measures does not change with the machine's luck). A trial complete
// before the call is kept as it is, as --resume keeps every complete
// trial. It returns the trial as it stands and how many of its runs are
// set aside, those of earlier runs of the directory included.
func (r *runner) settleTrial(ctx context.Context, p Point, n int) (t *report.TrialSummary, setAside int, err error) {
	set, err := filepath.Glob(filepath.Join(r.dir, report.SetAsideDir, p.Name, fmt.Sprintf("trial-%d.*", n)))
	if err != nil {
		return nil, 0, err
	}
	kept := r.complete(p, n)
	for setAside = len(set); ; setAside++ {
		if kept {
			t, err = report.LoadTrial(r.trialDir(p, n))
			return t, setAside, err
		}
		if t, err = r.runTrial(ctx, p, n); err != nil || t.Fidelity.Faithful() || setAside >= r.spec.Reruns {
			return t, setAside, err
		}
		to := filepath.Join(r.dir, report.SetAsideDir, p.Name, fmt.Sprintf("trial-%d.%d", n, setAside+1))
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			return nil, setAside, err
		}
		if err := os.Rename(r.trialDir(p, n), to); err != nil {
			return nil, setAside, err
		}
		fmt.Fprintf(r.opts.Progress, "        %s trial %d (%s) set aside as %s; it runs again with its seed (rerun %d of %d)\n",
			p.Name, n, t.Fidelity.Flags(), filepath.Join(report.SetAsideDir, p.Name, filepath.Base(to)), setAside+1, r.spec.Reruns)
	}
}

// Finish loads every trial of res.Dir and writes summary.csv, report.md and
// the figures, with the paper comparison when the run names a table.
func Finish(res *Result) error {
	rep, trials, cmp, err := writeReport(res.Dir)
	if err != nil {
		return err
	}
	res.Report, res.Trials, res.Paper, res.Failed = rep, trials, cmp, rep.Failed
	set, err := setAsideRuns(res.Dir)
	if err != nil {
		return err
	}
	res.SetAside = len(set)
	res.Unfaithful = 0
	for _, t := range trials {
		if !t.Fidelity.Faithful() {
			res.Unfaithful++
		}
	}
	return nil
}

// Report is `fabric report RUNDIR...`: it rewrites the report of the run
// directories into the first and returns its Markdown, with the paper
// comparison when the first run names a published table.
func Report(runDirs ...string) (string, error) {
	rep, _, _, err := writeReport(runDirs...)
	if err != nil {
		return "", err
	}
	return rep.Markdown, nil
}

// writeReport loads the trials under runDirs and writes the report into
// the first; the paper comparison is appended to report.md when that run's
// run.json names a published table, and a capacity search's answers
// (search.md) when the run was a search.
func writeReport(runDirs ...string) (*report.Report, []*report.TrialSummary, *paper.Comparison, error) {
	if len(runDirs) == 0 {
		return nil, nil, nil, errors.New("no run directory")
	}
	if err := CheckMerge(runDirs...); err != nil {
		return nil, nil, nil, err
	}
	trials, failed, err := report.LoadRun(runDirs...)
	if err != nil {
		return nil, nil, nil, err
	}
	rep, err := report.WriteRun(runDirs[0], failed, trials...)
	if err != nil {
		return nil, nil, nil, err
	}
	var cmp *paper.Comparison
	extra := ""
	if rf, err := ReadRunFile(runDirs[0]); err == nil { // a bare trial directory has no run.json
		if rf.Paper != "" && len(trials) > 0 {
			if cmp, err = paper.Compare(rf.Paper, rep.Rows, scaleOf(trials)); err != nil {
				return nil, nil, nil, err
			}
			cmp.PaperUnits = len(trials) > 0 && trials[0].PaperUnits
			extra += "\n" + cmp.Markdown()
		}
		if rf.Plan != nil {
			extra += report.PlanEventsMarkdown(rf.Plan.Events)
		}
	}
	set, err := setAsideRuns(runDirs[0])
	if err != nil {
		return nil, nil, nil, err
	}
	if len(set) > 0 {
		extra += fmt.Sprintf("\n%d trial run(s) that the fidelity monitor flagged were set aside and run again with their seeds (the experiment's reruns); they are kept in %s/ and counted in no result above.\n",
			len(set), report.SetAsideDir)
	}
	switch b, err := os.ReadFile(filepath.Join(runDirs[0], searchReportName)); {
	case err == nil:
		extra += string(b)
	case !errors.Is(err, os.ErrNotExist):
		return nil, nil, nil, err
	}
	if extra == "" {
		return rep, trials, cmp, nil
	}
	rep.Markdown += extra
	if err := os.WriteFile(filepath.Join(runDirs[0], "report.md"), []byte(rep.Markdown), 0o644); err != nil {
		return nil, nil, nil, err
	}
	return rep, trials, cmp, nil
}

// setAsideRuns lists the trial runs a run directory set aside.
func setAsideRuns(runDir string) ([]string, error) {
	return filepath.Glob(filepath.Join(runDir, report.SetAsideDir, "*", "trial-*"))
}

// scaleOf is the time-scale factor the trials ran at (the first that says).
func scaleOf(trials []*report.TrialSummary) float64 {
	for _, t := range trials {
		if t.PaperUnits { // its figures are the paper's already
			return 1
		}
		if t.ScaleFactor > 0 {
			return t.ScaleFactor
		}
	}
	return 0
}

// ReadRunFile reads run.json of a run directory.
func ReadRunFile(dir string) (*RunFile, error) {
	b, err := os.ReadFile(filepath.Join(dir, runFileName))
	if err != nil {
		return nil, fmt.Errorf("%s is not a run directory: %w", dir, err)
	}
	var rf RunFile
	if err := json.Unmarshal(b, &rf); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, runFileName), err)
	}
	return &rf, nil
}

// prepareRunDir makes (or, resuming, checks) the run directory and its
// run.json, and fixes the base seed.
func prepareRunDir(ctx context.Context, spec *Spec, opts Options, res *Result) (*RunFile, error) {
	if opts.Resume != "" {
		rf, err := ReadRunFile(opts.Resume)
		if err != nil {
			return nil, err
		}
		if rf.Name != spec.Name || rf.Quick != spec.IsQuick {
			return nil, fmt.Errorf("--resume %s: that run is %s (quick=%v), not %s (quick=%v)", opts.Resume, rf.Name, rf.Quick, spec.Name, spec.IsQuick)
		}
		if opts.Seed != 0 && opts.Seed != rf.Seed {
			return nil, fmt.Errorf("--resume %s: the run's seed is %d; --seed %d would make its trials incomparable", opts.Resume, rf.Seed, opts.Seed)
		}
		res.Dir = opts.Resume
		return rf, nil
	}
	seed := baseSeed(spec, opts.Seed)
	stamp := time.Now().UTC().Format("20060102T150405Z")
	dir := filepath.Join(opts.Out, spec.Name, stamp)
	for i := 2; ; i++ { // two runs in one second get distinct directories
		if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
			break
		}
		dir = filepath.Join(opts.Out, spec.Name, fmt.Sprintf("%s-%d", stamp, i))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	res.Dir = dir
	specJSON, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	rf := &RunFile{
		Name: spec.Name, File: spec.Path(), Quick: spec.IsQuick, Seed: seed, Started: time.Now().UTC(),
		Points: res.Points, Trials: spec.Trials, Duration: spec.Duration.String(), Paper: spec.Paper,
		Fabric: BuildVersion(), Kernel: kernelRelease(), Machine: machine.Read(), Doctor: features.Detect(ctx), Spec: specJSON,
	}
	b, err := json.MarshalIndent(rf, "", "  ")
	if err != nil {
		return nil, err
	}
	return rf, os.WriteFile(filepath.Join(dir, runFileName), append(b, '\n'), 0o644)
}

// markIncomplete records why a trial did not finish; resume reruns it.
func markIncomplete(dir string, err error) {
	if mkErr := os.MkdirAll(dir, 0o755); mkErr != nil {
		return
	}
	os.Remove(filepath.Join(dir, report.MetaFile)) // a half trial must not be reported
	msg := strings.TrimSpace(err.Error()) + "\n"
	os.WriteFile(filepath.Join(dir, incompleteMarker), []byte(msg), 0o644)
}
