package cost

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fabric-emu/fabric/internal/yamlfile"
)

func profileAt(date time.Time) *Profile {
	return &Profile{Kernel: "6.1", CPUModel: "EPYC", CPUs: 2, Fabric: "v1+abc", Date: date,
		Costs: Costs{HopUS: 3, Transports: map[string]Transport{"tcp": {MessageUS: 100, PacketUS: 20}}}}
}

// A profile stands for its machine for a day, on the same kernel, CPU,
// core count and build of fabric, if the hypervisor left it the CPU.
func TestStale(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	here := Identity{Kernel: "6.1", CPUModel: "EPYC", CPUs: 2, Fabric: "v1+abc"}
	for _, c := range []struct {
		name string
		edit func(*Profile)
		want string
	}{
		{"fresh", func(*Profile) {}, ""},
		{"23h old", func(p *Profile) { p.Date = now.Add(-23 * time.Hour) }, ""},
		{"25h old", func(p *Profile) { p.Date = now.Add(-25 * time.Hour) }, "measured 25h0m0s ago"},
		{"from the future", func(p *Profile) { p.Date = now.Add(time.Hour) }, "measured -1h0m0s ago"},
		{"kernel", func(p *Profile) { p.Kernel = "6.2" }, "measured on kernel 6.2, this machine runs 6.1"},
		{"cpu", func(p *Profile) { p.CPUModel = "Xeon" }, `measured on a "Xeon", this machine is a "EPYC"`},
		{"cores", func(p *Profile) { p.CPUs = 4 }, "measured with 4 CPUs, this machine has 2"},
		{"build", func(p *Profile) { p.Fabric = "v1+def" }, "measured by fabric v1+def, this is v1+abc"},
		{"quiet", func(p *Profile) { p.Costs.StealPct = 1.9 }, ""},
		{"stolen", func(p *Profile) { p.Costs.StealPct = 2 }, "measured while the hypervisor took 2.0 % of the CPU"},
	} {
		p := profileAt(now.Add(-time.Minute))
		c.edit(p)
		got := p.Stale(now, here)
		if c.want == "" && got != "" || c.want != "" && !strings.Contains(got, c.want) {
			t.Errorf("%s: Stale = %q, want %q", c.name, got, c.want)
		}
	}
}

// A profile written and read back is the same; one measured on another
// machine is bad input at its file and line; a broken one names its field.
func TestReadWriteAndAnotherMachine(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, FileName)
	p := profileAt(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	if err := p.Write(file); err != nil {
		t.Fatal(err)
	}
	got, err := Read(file)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Date.Equal(p.Date) || got.Costs.HopUS != 3 || got.Costs.Transports["tcp"].PacketUS != 20 || got.Identity() != p.Identity() {
		t.Errorf("read back %+v, want %+v", got, p)
	}
	if err := got.CheckMachine(p.Identity()); err != nil {
		t.Errorf("its own machine: %v", err)
	}
	err = got.CheckMachine(Identity{Kernel: "6.1", CPUModel: "Xeon", CPUs: 2})
	var ye *yamlfile.Error
	if !errors.As(err, &ye) || !strings.HasPrefix(err.Error(), file+":3: cpu_model: a profile from another machine") {
		t.Errorf("another machine: %v", err)
	}
	b, _ := os.ReadFile(file)
	os.WriteFile(file, []byte(strings.Replace(string(b), `"hop_us": 3`, `"hop_us": 0`, 1)), 0o644)
	if _, err := Read(file); err == nil || !strings.Contains(err.Error(), "costs.hop_us: want a measured cost above 0") {
		t.Errorf("a zero hop cost: %v", err)
	}
}

// The model adds its costs up by hand: 1,000 data packets and 500 ACKs
// through one switch at 2 µs, 10 messages at 100 µs and the packets at
// 20 µs, in a 100 ms window of two cores (200 ms of CPU): 33.5 ms, 16.75 %.
func TestPredictAddsTheCosts(t *testing.T) {
	c := Costs{HopUS: 2, RestPct: 1, StealPct: 4}
	tr := Transport{MessageUS: 100, PacketUS: 20}
	busy := Window{Messages: 10, DataPackets: 1000, HopPackets: 1500}
	l := Load{Transport: tr, Window: 100 * time.Millisecond, Windows: []Window{busy, {}, busy, {}}}
	p := c.Predict(l, 2)
	want := 1 + 100*(10*100+1000*20+1500*2)/200e3
	if math.Abs(p.PeakPct-want) > 1e-9 || math.Abs(p.MeanPct-(want+1)/2) > 1e-9 || p.SaturatedPct != 0 || p.Saturated() {
		t.Errorf("predicted %+v, want peak %.2f, mean %.2f, none saturated", p, want, (want+1)/2)
	}
	// Ten times the packets: 166 % of the cores in half the windows, the
	// monitor's rule broken.
	for _, i := range []int{0, 2} {
		l.Windows[i].DataPackets *= 10
		l.Windows[i].HopPackets *= 10
	}
	if p := c.Predict(l, 2); p.SaturatedPct != 50 || !p.Saturated() {
		t.Errorf("ten times the packets: %+v, want half the windows saturated", p)
	}
}

// Sparse packets cost SparsePacketUS instead of PacketUS, and PacketUS
// where it was not measured: 6 dense and 4 sparse packets.
func TestSparsePacketsCostTheirOwn(t *testing.T) {
	w := Window{DataPackets: 10, SparsePackets: 4}
	if got := (Transport{PacketUS: 10, SparsePacketUS: 30}).packetsUS(w); got != 6*10+4*30 {
		t.Errorf("measured: %g µs, want 180", got)
	}
	if got := (Transport{PacketUS: 10}).packetsUS(w); got != 100 {
		t.Errorf("unmeasured: %g µs, want 100", got)
	}
}

// A line's packets further apart than the loop's batching tolerance take
// a turn each; a burst of frames shorter than it shares turns, one per
// tolerance's worth of frames.
func TestDelayTurns(t *testing.T) {
	early := 10 * time.Microsecond
	if got := DelayTurns(1000, 121*time.Microsecond, early); got < 900 || got > 1000 {
		t.Errorf("frames 121 µs apart: %g turns for 1000 packets, want about one each", got)
	}
	if got := DelayTurns(1000, 1200*time.Nanosecond, early); math.Abs(got-1000/(1+10/1.2)) > 1e-9 {
		t.Errorf("frames 1.2 µs apart: %g turns for 1000 packets, want %g", got, 1000/(1+10/1.2))
	}
	if got := DelayTurns(1000, early, early); got != 500 {
		t.Errorf("frames one tolerance apart: %g turns for 1000 packets, want 500 (two a turn)", got)
	}
	if DelayTurns(0, early, early) != 0 {
		t.Error("no packets, some turns")
	}
}

// Lateness is read between the sleeps measured, and at the nearest beyond.
func TestLateP99(t *testing.T) {
	c := Costs{Lateness: []Lateness{{SleepUS: 50, P99US: 10}, {SleepUS: 1000, P99US: 100}}}
	for _, x := range []struct {
		d    time.Duration
		want float64
	}{{10 * time.Microsecond, 10}, {525 * time.Microsecond, 55}, {time.Second, 100}} {
		if got := c.LateP99(x.d); math.Abs(got-x.want) > 1e-9 {
			t.Errorf("LateP99(%v) = %g, want %g", x.d, got, x.want)
		}
	}
}
