package report

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/fabric-emu/fabric/hosts/transport"
)

// MetricValue is one of a transport's own metrics in a trial (metric
// records): the sum over the hosts of a count, or the mean of a metric's
// samples (records with a time).
type MetricValue struct {
	Name  string  `json:"name"`
	Unit  string  `json:"unit"`
	Value float64 `json:"value"`
	Mean  bool    `json:"mean,omitempty"` // samples averaged, not counts summed
}

// metricValues totals a trial's metric records by name and unit, in the
// order they first appear: counts summed, samples averaged.
func metricValues(records []transport.Metric) []MetricValue {
	var out []MetricValue
	n := map[int]int{}
	for _, m := range records {
		i := slices.IndexFunc(out, func(v MetricValue) bool {
			return v.Name == m.Name && v.Unit == m.Unit && v.Mean == (m.TNS != 0)
		})
		if i < 0 {
			i = len(out)
			out = append(out, MetricValue{Name: m.Name, Unit: m.Unit, Mean: m.TNS != 0})
		}
		out[i].Value += m.Value
		n[i]++
	}
	for i := range out {
		if out[i].Mean {
			out[i].Value /= float64(n[i])
		}
	}
	return out
}

// rowMetrics is each metric's mean over a row's trials that have it.
func rowMetrics(trials []*TrialSummary) []MetricValue {
	var out []MetricValue
	n := map[int]int{}
	for _, t := range trials {
		for _, m := range t.Metrics {
			i := slices.IndexFunc(out, func(v MetricValue) bool { return v.Name == m.Name && v.Unit == m.Unit && v.Mean == m.Mean })
			if i < 0 {
				i = len(out)
				out = append(out, MetricValue{Name: m.Name, Unit: m.Unit, Mean: m.Mean})
			}
			out[i].Value += m.Value
			n[i]++
		}
	}
	for i := range out {
		out[i].Value /= float64(n[i])
	}
	return out
}

// metricsTable lists, per row, the metrics its transport wrote: one line
// per metric, with its value per trial.
func metricsTable(b *strings.Builder, sh shape, rows []Row) {
	if !slices.ContainsFunc(rows, func(r Row) bool { return len(r.Metrics) > 0 }) {
		return
	}
	b.WriteString("\n## Transport metrics\n\nWhat the transports counted themselves (metric records): a count is summed over the hosts, " +
		"a sampled metric averaged over its samples; each cell is the mean over the row's trials.\n\n|")
	for _, k := range sh.keys {
		b.WriteString(" " + k + " |")
	}
	b.WriteString(" scheme | metric | per trial | unit |\n|" + strings.Repeat("---|", len(sh.keys)) + "---|---|---:|---|\n")
	for _, r := range rows {
		for _, m := range r.Metrics {
			b.WriteString("|")
			for _, v := range r.Keys {
				b.WriteString(" " + v + " |")
			}
			how := "sum over hosts"
			if m.Mean {
				how = "mean of samples"
			}
			fmt.Fprintf(b, " %s | %s | %s | %s (%s) |\n", r.Scheme, m.Name, metricText(m.Value), m.Unit, how)
		}
	}
}

// metricText writes a metric's value: whole numbers as such, others with
// three significant digits.
func metricText(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}
