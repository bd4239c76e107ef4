package testenv

import (
	"strings"
	"testing"
)

// recorder is a testing.TB that keeps what a test would print.
type recorder struct {
	testing.TB
	logs, errs []string
}

func (r *recorder) Helper()                        {}
func (r *recorder) Logf(format string, a ...any)   { r.logs = append(r.logs, format) }
func (r *recorder) Error(a ...any)                 { r.errs = append(r.errs, "error") }
func (r *recorder) Errorf(format string, a ...any) { r.errs = append(r.errs, format) }
func (r *recorder) Fatal(a ...any)                 { panic("fatal") }

// Retry stops at the first attempt without failures, ends an attempt at
// Fatalf, and fails the test with the last attempt's failures when every
// attempt failed.
func TestRetry(t *testing.T) {
	r := &recorder{TB: t}
	var ran []int
	Retry(r, 3, func(a *Attempt) {
		ran = append(ran, a.N)
		if a.N < 2 {
			a.Fatalf("attempt %d", a.N)
			t.Error("Fatalf did not end the attempt")
		}
	})
	if len(ran) != 2 || len(r.errs) != 0 || len(r.logs) != 2 {
		t.Errorf("passing on the second attempt: ran %v, errors %v, logs %v", ran, r.errs, r.logs)
	}

	r = &recorder{TB: t}
	ran = nil
	Retry(r, 3, func(a *Attempt) {
		ran = append(ran, a.N)
		a.Errorf("rate %d", a.N)
		a.Errorf("latency %d", a.N)
	})
	if len(ran) != 3 || len(r.errs) != 3 || !strings.HasPrefix(r.errs[2], "all %d attempts failed") {
		t.Errorf("failing every attempt: ran %v, errors %v", ran, r.errs)
	}
}
