package report

import (
	"strings"
	"testing"

	"github.com/fabric-emu/fabric/hosts/transport"
)

// A count is summed over the hosts' records and a sampled metric
// averaged; the report's table gives each row's mean over its trials.
func TestTransportMetrics(t *testing.T) {
	got := metricValues([]transport.Metric{
		{Name: "retransmissions", Value: 3, Unit: "packets"},
		{Name: "window", Value: 4, Unit: "packets", TNS: 10},
		{Name: "retransmissions", Value: 5, Unit: "packets"},
		{Name: "window", Value: 8, Unit: "packets", TNS: 20},
	})
	want := []MetricValue{{Name: "retransmissions", Unit: "packets", Value: 8}, {Name: "window", Unit: "packets", Value: 6, Mean: true}}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("metric values %+v, want %+v", got, want)
	}
	trial := func(n int, retx float64) *TrialSummary {
		return &TrialSummary{Scheme: "mine", SchemeName: "mine", Point: "mine", Trial: n,
			Metrics: []MetricValue{{Name: "retransmissions", Unit: "packets", Value: retx}}}
	}
	other := &TrialSummary{Scheme: "dctcp", SchemeName: "dctcp", Point: "dctcp", Trial: 1}
	rep, err := Write(t.TempDir(), trial(1, 8), trial(2, 11), other)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## Transport metrics", "| mine | retransmissions | 9.5 | packets (sum over hosts) |"} {
		if !strings.Contains(rep.Markdown, want) {
			t.Errorf("report lacks %q:\n%s", want, rep.Markdown)
		}
	}
	if strings.Contains(rep.Markdown, "| dctcp | retransmissions") {
		t.Errorf("a scheme without metrics has a metrics row:\n%s", rep.Markdown)
	}
}
