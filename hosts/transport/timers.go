package transport

import (
	"context"
	"time"
)

// Job is work a transport's timer does at a period while the transport has
// something to time: retransmission timeouts, stream samples.
type Job struct {
	Every time.Duration
	Run   func(now time.Time)
}

// RunWhileBusy runs each job every job.Every while busy reports work, until
// ctx ends. While busy reports none it has no timer at all: it sleeps until
// wake rings (the owner rings it when work begins) and asks again, so an
// idle transport process does not wake. A job's first run is one period
// after work begins.
func RunWhileBusy(ctx context.Context, wake Wake, busy func() bool, jobs ...Job) {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	due := make([]time.Time, len(jobs))
	idle := true
	for {
		if !busy() {
			idle = true
			select {
			case <-ctx.Done():
				return
			case <-wake:
			}
			continue
		}
		if idle {
			now := time.Now()
			for i, j := range jobs {
				due[i] = now.Add(j.Every)
			}
			idle = false
		}
		next := due[0]
		for _, d := range due[1:] {
			if d.Before(next) {
				next = d
			}
		}
		timer.Reset(time.Until(next))
		// Not on wake: rings while busy change nothing here, and each
		// would be a thread woken for nothing.
		select {
		case <-ctx.Done():
			return
		case now := <-timer.C:
			for i, j := range jobs {
				if now.Before(due[i]) {
					continue
				}
				j.Run(now)
				for !now.Before(due[i]) { // a late timer skips the periods it missed
					due[i] = due[i].Add(j.Every)
				}
			}
		}
	}
}
