package experiments

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/fabric-emu/fabric/emu"
)

// scheduleExperiment is issue 12's schedule target: 60 s of W4 at 80 %
// load on the 16-host k = 4 fat tree, every host a client and a server.
const scheduleExperiment = `
name: sched
lab:
  name: sched
  topology: {kind: fattree, k: 4}
  links: {rate: 100Mbit}
schemes:
  a: {cc: cubic}
  b: {cc: dctcp}
traffic: {pattern: dynamic, workload: homa_w4_google_all, load: 0.8, client: all, servers: all}
duration: 60s
`

// drawSchedule resolves spec's lab and draws point p's schedule with
// seed.
func drawSchedule(t testing.TB, spec *Spec, p Point, seed uint64) (*emu.Graph, *Schedule) {
	t.Helper()
	g, err := spec.LabSpec.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	s, err := spec.Schedule(g, p, seed)
	if err != nil {
		t.Fatal(err)
	}
	return g, s
}

// writeSchedule computes point p's schedule with seed and returns each
// host's file, by name.
func writeSchedule(t testing.TB, spec *Spec, p Point, seed uint64) (map[string][]byte, int) {
	t.Helper()
	_, s := drawSchedule(t, spec, p, seed)
	dir := t.TempDir()
	if err := s.WriteFiles(dir); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = b
	}
	return out, s.Len()
}

// The same seed gives the same schedule files, byte for byte, for every
// scheme of a point and on every computation; another seed gives others.
func TestScheduleSameSeedSameBytes(t *testing.T) {
	spec, err := Parse("sched.yaml", []byte(scheduleExperiment), "")
	if err != nil {
		t.Fatal(err)
	}
	spec.Duration = 5 * time.Second // the property, not the size
	pts := spec.Points()
	if len(pts) != 2 || pts[0].Scheme == pts[1].Scheme {
		t.Fatalf("points %+v, want one per scheme", pts)
	}
	a, n := writeSchedule(t, spec, pts[0], 7)
	b, _ := writeSchedule(t, spec, pts[1], 7)
	again, _ := writeSchedule(t, spec, pts[0], 7)
	other, _ := writeSchedule(t, spec, pts[0], 8)
	if n < 1000 || len(a) != 16 {
		t.Fatalf("%d messages in %d files; want ≥ 1000 in 16 (one per host)", n, len(a))
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for k := range a {
			if !yield(k) {
				return
			}
		}
	})
	differs := 0
	for _, f := range names {
		if !bytes.Equal(a[f], b[f]) {
			t.Errorf("%s: scheme %s and scheme %s got different schedules", f, pts[0].Scheme, pts[1].Scheme)
		}
		if !bytes.Equal(a[f], again[f]) {
			t.Errorf("%s: a second computation with the same seed differs", f)
		}
		if !bytes.Equal(a[f], other[f]) {
			differs++
		}
	}
	if differs == 0 {
		t.Error("seeds 7 and 8 gave the same schedule")
	}
}

// BenchmarkSchedule60sW4 is issue 12's generation target (< 1 s): a 60 s,
// 80 %-load W4 schedule on the 16-host fat tree. It reports the time to
// compute it (s/schedule, messages/s) and, apart, to write it as each
// host's JSON-lines file (write-s; every message is written twice, to its
// sender's file and its receiver's).
func BenchmarkSchedule60sW4(b *testing.B) {
	spec, err := Parse("sched.yaml", []byte(scheduleExperiment), "")
	if err != nil {
		b.Fatal(err)
	}
	p := spec.Points()[0]
	g, err := spec.LabSpec.Resolve()
	if err != nil {
		b.Fatal(err)
	}
	var gen, write time.Duration
	var n int
	for i := range b.N {
		t0 := time.Now()
		s, err := spec.Schedule(g, p, uint64(i))
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := s.WriteFiles(b.TempDir()); err != nil {
			b.Fatal(err)
		}
		gen, write, n = gen+t1.Sub(t0), write+time.Since(t1), s.Len()
	}
	per := gen.Seconds() / float64(b.N)
	b.ReportMetric(float64(n), "messages")
	b.ReportMetric(float64(n)/per, "messages/s")
	b.ReportMetric(per, "s/schedule")
	b.ReportMetric(write.Seconds()/float64(b.N), "write-s")
}
