package experiments

import (
	"errors"
	"strings"
	"testing"

	"github.com/fabric-emu/fabric/internal/yamlfile"
)

// measure.queue refuses a sampler faster than a sample's cost allows.
func TestQueueSamplerRefusesAShortGap(t *testing.T) {
	src := strings.Replace(poissonExperiment, "duration: 100s", "duration: 100s\nmeasure: {queue: {every: 50us}}", 1)
	_, err := Parse("pois.yaml", []byte(src), "")
	var ye *yamlfile.Error
	if !errors.As(err, &ye) || ye.Field != "measure.queue.every" {
		t.Fatalf("got %v, want an error at measure.queue.every", err)
	}
	ok := strings.Replace(src, "50us", "1ms", 1)
	if _, err := Parse("pois.yaml", []byte(ok), ""); err != nil {
		t.Fatal(err)
	}
}
