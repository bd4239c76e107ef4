package stats

import "math"

// t975 is Student's t distribution's 97.5th percentile for 1..30 degrees
// of freedom (any table of the t distribution, e.g. NIST/SEMATECH
// e-Handbook of Statistical Methods, §1.3.6.7.2), for two-sided 95 %
// confidence intervals.
var t975 = [...]float64{12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
	2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
	2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042}

// MeanCI95 is the mean of values (one per trial) and the half-width of its
// two-sided 95 % confidence interval, mean ± t·s/√n with Student's t for
// n − 1 degrees of freedom (the normal's 1.96 beyond 30). The half-width
// is NaN for fewer than two values, and the mean NaN for none.
func MeanCI95(values []float64) (mean, half float64) {
	n := len(values)
	mean = Mean(values)
	if n < 2 {
		return mean, math.NaN()
	}
	ss := 0.0
	for _, v := range values {
		ss += (v - mean) * (v - mean)
	}
	t := 1.96
	if n-1 <= len(t975) {
		t = t975[n-2]
	}
	return mean, t * math.Sqrt(ss/float64(n-1)) / math.Sqrt(float64(n))
}
