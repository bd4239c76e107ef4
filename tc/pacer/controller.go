package pacer

import "time"

// controller is HULL's pacing-rate estimator (§4.2, eq. 4), run every T_r:
//
//	R ← (1−η)·R + η·M_r/T_r + β·Q_tb
//
// R is the token bucket's rate and M_r the bytes that reached the bucket
// in the last interval (bytes/s and bytes), Q_tb the bucket's backlog in
// bytes. The first two terms are a low-pass filter on the arrival rate; the
// β term keeps the backlog (and the delay of paced packets) small. If the
// paced flows send at a steady R*, the only fixed point is R = R*, Q = 0
// (the paper's footnote 2).
type controller struct {
	eta, beta float64
	min, max  float64 // bytes/s
	rate      float64 // bytes/s
}

// step applies one update. arrived is M_r, the bytes that entered the bucket
// during elapsed; backlog is Q_tb now. The loop's real interval is used for
// M_r/T_r, since a userspace ticker wakes late on a busy machine; β·Q stays
// per update, as in the paper.
func (c *controller) step(arrived float64, elapsed time.Duration, backlog float64) float64 {
	if elapsed <= 0 {
		return c.rate
	}
	r := (1-c.eta)*c.rate + c.eta*arrived/elapsed.Seconds() + c.beta*backlog
	c.rate = min(max(r, c.min), c.max)
	return c.rate
}
