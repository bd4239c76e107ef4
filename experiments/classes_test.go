package experiments

import (
	"cmp"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/fabric-emu/fabric/internal/yamlfile"
)

// Log-normal arrivals keep the mean gap the load asks for and have the
// shape σ asked for: both recovered from 10⁴ draws within 5 % (issue 15).
//
// σ is estimated as the standard deviation of the draws' logarithms
// (standard error σ/√(2n), 0.7 % of σ here). The mean is estimated as
// exp(μ̂ + σ̂²/2) from the same logarithms, the maximum-likelihood
// estimator: the plain sample mean of a log-normal with σ = 2 has a
// relative standard error of √(e^{σ²} − 1)/√n = 7.3 % at n = 10⁴, so no
// 10⁴ draws can pin it to 5 %; the MLE's is about √(σ² + σ⁴/2)/√n = 3.5 %.
// For σ ≤ 1 the plain mean (≤ 1.3 % standard error) is checked too.
func TestLogNormalArrivalsRecoverSigmaAndMean(t *testing.T) {
	const n, mean = 10_000, 0.004 // 4 ms between arrivals
	for _, sigma := range []float64{0.5, 1, 1.5, 2} {
		draw := Arrival{LogNormalSigma: sigma}.sampler(mean, rand.New(rand.NewPCG(11, 0x5c4ed)))
		var sum, sumLog, sumLog2 float64
		for range n {
			x := draw()
			sum += x
			sumLog += math.Log(x)
			sumLog2 += math.Log(x) * math.Log(x)
		}
		mu := sumLog / n
		sd := math.Sqrt((sumLog2 - n*mu*mu) / (n - 1))
		mle := math.Exp(mu + sd*sd/2)
		t.Logf("σ = %g: σ̂ = %.4f, mean (MLE) = %.5f, sample mean = %.5f; want %g", sigma, sd, mle, sum/n, mean)
		if math.Abs(sd-sigma) > 0.05*sigma {
			t.Errorf("σ = %g: recovered σ̂ = %.4f, more than 5 %% off", sigma, sd)
		}
		if math.Abs(mle-mean) > 0.05*mean {
			t.Errorf("σ = %g: recovered mean %.5f, more than 5 %% off %g", sigma, mle, mean)
		}
		if sigma <= 1 && math.Abs(sum/n-mean) > 0.05*mean {
			t.Errorf("σ = %g: sample mean %.5f, more than 5 %% off %g", sigma, sum/n, mean)
		}
	}
	// Poisson (no σ): exponential gaps of the mean.
	draw := Arrival{}.sampler(mean, rand.New(rand.NewPCG(11, 0x5c4ed)))
	sum := 0.0
	for range n {
		sum += draw()
	}
	if math.Abs(sum/n-mean) > 0.05*mean {
		t.Errorf("Poisson: sample mean %.5f, more than 5 %% off %g", sum/n, mean)
	}
}

// classExperiment is two SWP classes on W3 sizes: a foreground class at a
// fixed 10 % of the link and a background class swept (SWP §2.1).
const classExperiment = `name: classes
lab:
  name: clab
  topology: {kind: star, hosts: 5}
  links: {rate: 10Mbit}
schemes:
  fifo: {cc: dctcp}
  prio: {cc: dctcp, ports: {queues: {bands: 2}}}
  w: {cc: dctcp, ports: {queues: {weights: [1, 4]}}}
traffic:
  pattern: dynamic
  client: [h0, h1, h2, h3]
  servers: rest
  classes:
    fg:
      workload: homa_w3_heavy_middle
      load: 0.1
      arrival: {lognormal_sigma: 2}
      dscp: CS7
      slo: {p99_slowdown: 2.5, below: 1bdp}
    bg:
      workload: homa_w3_heavy_middle
      share: 1
      arrival: {lognormal_sigma: 2}
      dscp: AF11
sweep: {scheme: all, load: [0.2, 0.5]}
duration: 10s
`

// Two classes are mixed into one schedule, each with its name and code
// point, in time order, each offering its own share of every receiver's
// link. No lab: the schedule comes from the spec and a seed alone.
func TestClassesMixIntoOneSchedule(t *testing.T) {
	spec, err := Parse("classes.yaml", []byte(classExperiment), "")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(spec.ClassOrder, ",") != "fg,bg" {
		t.Fatalf("class order %v, want fg,bg (the file's)", spec.ClassOrder)
	}
	g, err := spec.LabSpec.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	// 4 receivers × 1000 s: ~200 k foreground messages. Log-normal (σ = 2)
	// gaps have a coefficient of variation of √(e⁴ − 1) = 7.3, and W3's
	// sizes about 4, so a class's bytes have a relative standard error of
	// about √(7.3² + 4²)/√200k ≈ 1.9 %: 6 % is three of them.
	spec.Duration = 1000e9
	p := spec.Points()[3] // fifo at load 0.5
	if p.Load != 0.5 || p.Scheme != "fifo" {
		t.Fatalf("point %+v", p)
	}
	s, err := spec.Schedule(g, p, 3)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(s.Classes, ",") != "fg,bg" {
		t.Fatalf("schedule classes %v", s.Classes)
	}
	bytes := map[string]float64{}
	var last int64
	for i := range s.Len() {
		m := s.Message(i)
		if m.TimeNS < last {
			t.Fatalf("message %d at %d ns before its predecessor at %d", m.ID, m.TimeNS, last)
		}
		last = m.TimeNS
		want := map[string]uint8{"fg": 56, "bg": 10}[m.Class]
		if m.Class == "" || m.DSCP != want {
			t.Fatalf("message %+v: class %q DSCP %d, want fg CS7 (56) or bg AF11 (10)", m, m.Class, m.DSCP)
		}
		bytes[m.Class] += float64(m.Size)
	}
	link := 4 * 10e6 / 8 * spec.Duration.Seconds() // four receivers' links, bytes
	for class, want := range map[string]float64{"fg": 0.1, "bg": 0.5} {
		got := bytes[class] / link
		t.Logf("%s: %.4f of the receivers' links (want %g), %d messages in all", class, got, want, s.Len())
		if math.Abs(got-want) > 0.06*want {
			t.Errorf("class %s offers %.4f of the link, want %g ± 6 %%", class, got, want)
		}
	}
	if got := spec.OfferedLoad(p); math.Abs(got-0.6) > 1e-12 {
		t.Errorf("offered load %v, want 0.6", got)
	}
}

// searchExperiment is classExperiment searched for its least capacity:
// the background's share needs a fixed traffic.load, and the sweep may
// only name schemes.
var searchExperiment = strings.NewReplacer(
	"  servers: rest\n", "  servers: rest\n  load: 0.5\n",
	"sweep: {scheme: all, load: [0.2, 0.5]}\n",
	"sweep: {scheme: all}\nsearch: {rate: {min: 2Mbit, max: 20Mbit}, weights: [[1, 4], [1, 1]]}\n",
).Replace(classExperiment)

// Bad classes and searches are rejected with file:line: field: message.
func TestBadClassesNameFileAndLine(t *testing.T) {
	cases := []struct {
		name, from, to string
		line           int
		want           string
		base           string // classExperiment when empty
	}{
		{"SLO on an unknown size range", "below: 1bdp}", "range: tiny}", 20, `traffic.classes.fg.slo.range: unknown size range "tiny"`, ""},
		{"SLO bound that is no size", "below: 1bdp}", "below: 2 parsecs}", 20, "traffic.classes.fg.slo.below: size", ""},
		{"SLO without a bound", "{p99_slowdown: 2.5, below: 1bdp}", "{below: 1bdp}", 20, "traffic.classes.fg.slo.p99_slowdown: an objective needs", ""},
		{"SLO unknown key", "below: 1bdp}", "below: 1bdp, p98: 3}", 20, `unknown key "p98"`, ""},
		{"shares over 1", "load: 0.1\n", "share: 0.3\n", 14, "traffic.classes: the classes' shares sum to 1.3", ""},
		{"classes offer the whole link", "load: 0.1\n", "load: 0.6\n", 14, "traffic.classes: at load 0.5 the classes offer 1.1", ""},
		{"share and load", "share: 1\n", "share: 1\n      load: 0.1\n", 23, "traffic.classes.bg.share: give a share", ""},
		{"more weights than classes", "weights: [1, 4]", "weights: [1, 4, 2]", 9, "schemes.w.ports.queues.weights: 3 weights for 2 traffic classes", ""},
		{"weight for a class that does not exist", "dscp: CS7", "dscp: CS1", 9, "schemes.w.ports.queues.weights[0]: weight for band 0, which no traffic class uses", ""},
		{"unknown workload", "workload: homa_w3_heavy_middle\n      share", "workload: homa_w9\n      share", 22, "traffic.classes.bg.workload", ""},
		{"workload beside classes", "servers: rest\n", "servers: rest\n  workload: hull_1k_10m\n", 14, "traffic.workload: with classes", ""},
		{"bad DSCP", "dscp: AF11", "dscp: AF99", 25, "traffic.classes.bg.dscp", ""},
		{"negative sigma", "share: 1\n      arrival: {lognormal_sigma: 2}", "share: 1\n      arrival: {lognormal_sigma: -1}", 24, "traffic.classes.bg.arrival.lognormal_sigma", ""},
		{"search bracket upside down", "max: 20Mbit", "max: 1Mbit", 28, "search.rate.max: want a rate above rate.min", searchExperiment},
		{"search bracket below the offered rate", "max: 20Mbit", "max: 5Mbit", 28, "search.rate.max: the classes offer 6 Mbit/s", searchExperiment},
		{"search weights for a missing class", "[1, 1]]", "[1, 1, 2]]", 28, "search.weights[1]: 3 weights for 2 traffic classes", searchExperiment},
		{"search weight of zero", "[1, 1]]", "[1, 0]]", 28, "search.weights[1][1]: a weight is a positive integer", searchExperiment},
		{"search with a load sweep", "sweep: {scheme: all}", "sweep: {scheme: all, load: [0.2]}", 28, "search: a search varies the link rate", searchExperiment},
		{"search tolerance", "max: 20Mbit}", "max: 20Mbit}, tolerance: 1.5", 28, "search.tolerance: want a relative resolution", searchExperiment},
		{"search budget below one probe", "max: 20Mbit}", "max: 20Mbit}, max_trials: -1", 28, "search.max_trials", searchExperiment},
		{"search with an unknown first guess", "max: 20Mbit}", "max: 20Mbit}, first_guess: oracle", 28, `search.first_guess: want "model"`, searchExperiment},
		{"model guess of another transport", "max: 20Mbit}", "max: 20Mbit}, first_guess: model", 28, "search.first_guess: scheme w: the model is of fabric's tcp transport",
			strings.Replace(searchExperiment, "w: {cc: dctcp,", "w: {transport: homa,", 1)},
		{"model guess off a star", "max: 20Mbit}", "max: 20Mbit}, first_guess: model", 28, "search.first_guess: the model needs a star",
			strings.Replace(searchExperiment, "{kind: star, hosts: 5}", "{kind: leafspine, leaves: 2, spines: 1, hosts_per_leaf: 3}", 1)},
		{"negative reruns", "load: [0.2, 0.5]}\n", "load: [0.2, 0.5]}\nreruns: -1\n", 27, "reruns: want 0 or more, got -1", ""},
		{"search without SLOs", "      slo: {p99_slowdown: 2.5, below: 1bdp}\n", "", 27, "search: a search looks for the least rate", searchExperiment},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			base := cmp.Or(c.base, classExperiment)
			if !strings.Contains(base, c.from) {
				t.Fatalf("test bug: %q not in the good file", c.from)
			}
			text := strings.Replace(base, c.from, c.to, 1)
			_, err := Parse("bad.yaml", []byte(text), "")
			var ye *yamlfile.Error
			if !errors.As(err, &ye) {
				t.Fatalf("error %v (%T) is not a *yamlfile.Error", err, err)
			}
			if ye.File != "bad.yaml" || ye.Line != c.line || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %q (line %d), want bad.yaml:%d ... %q", err, ye.Line, c.line, c.want)
			}
		})
	}
}
