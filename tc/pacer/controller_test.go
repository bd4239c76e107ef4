package pacer

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/fabric-emu/fabric/internal/yamlfile"
)

func TestControllerStepIsEquation4(t *testing.T) {
	c := controller{eta: 0.125, beta: 250, min: 0, max: 1e12, rate: 1e6}
	// 2000 bytes arrived in 1 ms (a 2 MB/s sample), 1000 bytes queued:
	// R = 0.875·1e6 + 0.125·2e6 + 250·1000.
	got := c.step(2000, time.Millisecond, 1000)
	if want := 0.875e6 + 0.125*2e6 + 250*1000; math.Abs(got-want) > 1e-6 {
		t.Fatalf("R = %.1f, want %.1f", got, want)
	}
	// The sample uses the real elapsed time, not the nominal interval: the
	// same bytes over 2 ms are half the rate.
	c = controller{eta: 0.125, beta: 0, max: 1e12, rate: 0}
	if got := c.step(2000, 2*time.Millisecond, 0); math.Abs(got-0.125*1e6) > 1e-6 {
		t.Errorf("R after a late tick = %.1f, want %.1f", got, 0.125*1e6)
	}
}

func TestControllerClamps(t *testing.T) {
	c := controller{eta: 0.125, beta: 250, min: 1e5, max: 1e7, rate: 5e6}
	if got := c.step(1e9, time.Millisecond, 1e6); got != 1e7 {
		t.Errorf("R above line rate: %.0f", got)
	}
	for range 200 {
		c.step(0, time.Millisecond, 0)
	}
	if c.rate != 1e5 {
		t.Errorf("idle R settled at %.0f, want the floor 1e5", c.rate)
	}
}

// simulateBucket closes the loop: paced flows offer rStar bytes/s; each
// interval the bucket sends at most R·T_r of what is queued; the controller
// then updates R. It returns the rate and backlog after n intervals.
func simulateBucket(c *controller, rStar float64, tr time.Duration, n int) (rate, backlog float64) {
	q := 0.0
	for range n {
		in := rStar * tr.Seconds()
		out := math.Min(q+in, c.rate*tr.Seconds())
		q += in - out
		c.step(in, tr, q)
	}
	return c.rate, q
}

// TestControllerFixedPoint checks the paper's footnote 2: with the paced
// flows at a fixed R*, the only fixed point is R = R*, Q = 0, from a rate
// that starts too low (backlog builds, β drains it) or too high.
func TestControllerFixedPoint(t *testing.T) {
	const rStar = 10e6 / 8 // 10 Mbit/s in bytes/s
	tr := DefaultRateInterval
	for _, start := range []float64{rStar / 4, rStar * 4} {
		c := controller{eta: DefaultEta, beta: DefaultBeta(tr), min: 1000, max: 100e6 / 8, rate: start}
		rate, q := simulateBucket(&c, rStar, tr, 2000)
		if math.Abs(rate-rStar)/rStar > 0.01 || q > 1500 {
			t.Errorf("start %.0f B/s: after 2 s R = %.0f B/s (R* = %.0f), backlog %.0f B", start, rate, rStar, q)
		}
	}
}

// TestBetaDrainsBacklog compares β = 0 with the default: without the
// backlog term a rate that starts too low keeps a standing queue far
// longer.
func TestBetaDrainsBacklog(t *testing.T) {
	const rStar = 10e6 / 8
	tr := DefaultRateInterval
	with := controller{eta: DefaultEta, beta: DefaultBeta(tr), min: 1000, max: 100e6 / 8, rate: rStar / 2}
	without := with
	without.beta = 0
	_, qWith := simulateBucket(&with, rStar, tr, 50)
	_, qWithout := simulateBucket(&without, rStar, tr, 50)
	if qWith*2 > qWithout {
		t.Errorf("after 50 ms backlog with β=%g: %.0f B, with β=0: %.0f B; β should at least halve it", with.beta, qWith, qWithout)
	}
}

func TestConfigDefaults(t *testing.T) {
	c, err := Config{}.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	if c.RateInterval != time.Millisecond || c.Eta != 0.125 || c.PAssoc != 0.125 || c.IdleTimeout != 10*time.Millisecond {
		t.Errorf("defaults: %+v", c)
	}
	if c.Beta != 250 {
		t.Errorf("β at 1 ms = %g, want 16·1ms/64µs = 250", c.Beta)
	}
	c, _ = Config{RateInterval: 64 * time.Microsecond * 4}.Resolve()
	if c.Beta != 64 {
		t.Errorf("β at 256 µs = %g, want 64", c.Beta)
	}
}

func TestConfigErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct {
		cfg   Config
		field string
	}{
		{Config{RateInterval: 64 * time.Microsecond}, "rate_interval"},
		{Config{Eta: 1.5}, "eta"},
		{Config{Beta: -1}, "beta"},
		{Config{PAssoc: 2}, "p_assoc"},
		{Config{Flows: -3}, "flows"},
		{Config{Burst: 100}, "burst"},
	} {
		_, err := tc.cfg.Resolve()
		var fe *yamlfile.FieldError
		if !errors.As(err, &fe) || fe.Path != tc.field {
			t.Errorf("%+v: error %v, want one for field %s", tc.cfg, err, tc.field)
			continue
		}
		if !strings.Contains(err.Error(), tc.field) {
			t.Errorf("message %q does not name %s", err, tc.field)
		}
	}
}
