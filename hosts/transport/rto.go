package transport

import "time"

// RTTEstimator times a transport's round trips (a packet to its ACK, a
// message to its DONE) as TCP does (RFC 6298: smoothed RTT and its
// variation, gains 1/8 and 1/4; by Karn's rule the caller never samples
// what it resent), so that its timeout follows what the lab and the
// machine do now: a fat tree's queues, or delay lines and receivers a
// busy CPU holds up, keep a packet far longer than the unloaded RTT the
// contract gives. With a fixed timeout, ndp/permutation resent 60 % of its
// packets needlessly; Homa's, fixed, took a CPU-starved receiver's
// slowness for loss.
type RTTEstimator struct {
	srtt, rttvar time.Duration
}

// Sample adds one measured round trip.
func (r *RTTEstimator) Sample(d time.Duration) {
	if r.srtt == 0 {
		r.srtt, r.rttvar = d, d/2
		return
	}
	diff := r.srtt - d
	if diff < 0 {
		diff = -diff
	}
	r.rttvar += (diff - r.rttvar) / 4
	r.srtt += (d - r.srtt) / 8
}

// RTO is the timeout: SRTT + 4 RTTVAR, never below floor.
func (r *RTTEstimator) RTO(floor time.Duration) time.Duration {
	return max(floor, r.srtt+4*r.rttvar)
}
