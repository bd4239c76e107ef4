package experiments

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fabric-emu/fabric/internal/yamlfile"
)

// poissonExperiment sends Poisson packets from two hosts into a 25 Mbit/s
// port (the lab's own, so that the schedule is the same for every scheme).
const poissonExperiment = `
name: pois
lab:
  name: pois
  topology: {kind: star, hosts: 3}
  links: {rate: 100Mbit}
  ports: {overrides: {"s0:eth0": {rate: 25Mbit}}}
schemes:
  udp: {transport: udp}
  pq: {transport: udp, ports: {rate: 50Mbit}}
traffic: {pattern: poisson, client: h0, servers: [h1, h2], size: 1472B, load: 0.6}
duration: 100s
`

// The poisson pattern's send times are a Poisson process at load × the
// port's rate over a frame's bits (1514 bytes at 25 Mbit/s: 1238.4
// packets a second at 0.6): over 100 s the count is within 4 standard
// deviations (√n) of its mean, the gaps are exponential (Kolmogorov–
// Smirnov at the 1 % level, 1.63/√n; the gaps of a Poisson process are
// independent), each sender carries about half (a fair coin per packet:
// within 4 standard deviations), every packet has the size asked for, and
// a scheme's own port rate does not change the schedule.
func TestPoissonScheduleRateAndGaps(t *testing.T) {
	spec, err := Parse("pois.yaml", []byte(poissonExperiment), "")
	if err != nil {
		t.Fatal(err)
	}
	g, err := spec.LabSpec.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	pts := spec.Points()
	s, err := spec.Schedule(g, pts[0], 5)
	if err != nil {
		t.Fatal(err)
	}
	pps := 0.6 * 25e6 / (1514 * 8)
	want := pps * spec.Duration.Seconds()
	n := float64(s.Len())
	t.Logf("%d packets, want %.0f ± %.0f", s.Len(), want, math.Sqrt(want))
	if math.Abs(n-want) > 4*math.Sqrt(want) {
		t.Errorf("%d packets in %v, want %.0f ± %.0f (4 σ)", s.Len(), spec.Duration, want, 4*math.Sqrt(want))
	}
	var gaps []float64
	from := map[string]int{}
	prev := int64(0)
	for i := range s.Len() {
		m := s.Message(i)
		if m.Size != 1472 || m.Dst != "h0" || m.Pattern != "poisson" {
			t.Fatalf("message %+v, want 1472 bytes to h0", m)
		}
		from[m.Src]++
		gaps = append(gaps, float64(m.TimeNS-prev)/1e9)
		prev = m.TimeNS
	}
	slices.Sort(gaps)
	d := 0.0
	for i, x := range gaps {
		f := 1 - math.Exp(-pps*x)
		d = max(d, math.Abs(float64(i+1)/n-f), math.Abs(float64(i)/n-f))
	}
	if crit := 1.63 / math.Sqrt(n); d > crit {
		t.Errorf("the gaps' Kolmogorov–Smirnov distance to the exponential law is %.4f, above %.4f (1 %% level)", d, crit)
	}
	if h1 := float64(from["h1"]); math.Abs(h1-n/2) > 4*math.Sqrt(n/4) || from["h1"]+from["h2"] != s.Len() {
		t.Errorf("senders %v, want each about half of %d", from, s.Len())
	}
	other, err := spec.Schedule(g, pts[1], 5)
	if err != nil {
		t.Fatal(err)
	}
	if other.Len() != s.Len() || other.Message(s.Len()/2) != s.Message(s.Len()/2) {
		t.Errorf("scheme %s (its own port rate) changed the schedule", pts[1].Scheme)
	}
}

// The same seed gives the same packets; another seed, others.
func TestPoissonScheduleSameSeed(t *testing.T) {
	spec, err := Parse("pois.yaml", []byte(poissonExperiment), "")
	if err != nil {
		t.Fatal(err)
	}
	spec.Duration = 5 * time.Second
	p := spec.Points()[0]
	a, n := writeSchedule(t, spec, p, 7)
	b, _ := writeSchedule(t, spec, p, 7)
	c, _ := writeSchedule(t, spec, p, 8)
	if n < 1000 {
		t.Fatalf("%d packets, want about 6200", n)
	}
	for name, x := range a {
		if string(x) != string(b[name]) {
			t.Errorf("%s differs between two computations with seed 7", name)
		}
		if string(x) == string(c[name]) {
			t.Errorf("%s is the same with seeds 7 and 8", name)
		}
	}
}

// The pattern refuses what it cannot send: a packet larger than a
// datagram on the client's link, no load, two clients, kernel TCP.
func TestPoissonRefusesBadInput(t *testing.T) {
	for _, c := range []struct{ from, to, field string }{
		{"size: 1472B", "size: 1473B", "traffic.size"},
		{"size: 1472B", "size: 8B", "traffic.size"},
		{", load: 0.6", "", "traffic.load"},
		{"client: h0", "client: [h0, h1]", "traffic.client"},
		{"udp: {transport: udp}", "udp: {cc: cubic}", "schemes.udp.transport"},
	} {
		src := strings.Replace(poissonExperiment, c.from, c.to, 1)
		_, err := Parse("pois.yaml", []byte(src), "")
		var ye *yamlfile.Error
		if err == nil || !errors.As(err, &ye) || ye.Field != c.field {
			t.Errorf("%q → %q: got %v, want an error at %s", c.from, c.to, err, c.field)
		}
	}
}
