package experiments

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fabric-emu/fabric/hosts"
	"github.com/fabric-emu/fabric/hosts/transport/transporttest"
	"github.com/fabric-emu/fabric/internal/testenv"
	"github.com/fabric-emu/fabric/results/report"
)

// buildExample compiles examples/transport, statically (the docker case
// puts it in a FROM-scratch image).
func buildExample(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "transport")
	cmd := exec.Command("go", "build", "-o", bin, "./examples/transport")
	cmd.Dir = ".."
	cmd.Env = append(cmd.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./examples/transport: %v\n%s", err, out)
	}
	return bin
}

// exampleExperiment runs the schemes on one schedule: h0 requests from h1
// and h2 at 30 % load, messages of Homa's W2 (mostly short), on 10 Mbit/s
// links: about 900 messages a second, each a connection of the example's,
// which two cores carry (at 100 Mbit/s, ten times as many saturated the
// CPU in every trial).
func exampleExperiment(runtime, schemes string) string {
	return fmt.Sprintf(`name: example
lab:
  name: example
  topology: {kind: star, hosts: 3}
  links: {rate: 10Mbit, delay: 200us}
  hosts: {runtime: %s}
schemes:
%s
traffic: {pattern: dynamic, workload: homa_w2_google_search, client: h0, servers: rest, load: 0.3}
duration: 3s
`, runtime, schemes)
}

// runExample runs an experiment and returns its trials by scheme.
func runExample(t *testing.T, yaml string) map[string]*report.TrialSummary {
	t.Helper()
	spec, err := Parse("example.yaml", []byte(yaml), "")
	if err != nil {
		t.Fatal(err)
	}
	res := runOnce(t, spec, Options{Seed: 5}, 3*time.Minute)
	out := map[string]*report.TrialSummary{}
	for _, tr := range res.Trials {
		out[tr.SchemeName] = tr
	}
	return out
}

// wantFlows checks that a scheme's trial measured FCTs for its flows.
func wantFlows(t *testing.T, trials map[string]*report.TrialSummary, scheme string) {
	t.Helper()
	tr := trials[scheme]
	if tr == nil {
		t.Fatalf("no trial of scheme %s (have %v)", scheme, trials)
	}
	if tr.SlowdownAll == nil || tr.SlowdownAll.N < 10 {
		t.Errorf("scheme %s: slowdown of %v flows, want ≥ 10 measured", scheme, tr.SlowdownAll)
	}
}

// The example transport, a user's program, runs through the contract next
// to fabric's own TCP on the same schedule, on netns hosts; its FCTs
// appear in the report beside tcp's.
func TestExampleTransportNetNS(t *testing.T) {
	testenv.RequireRoot(t)
	bin := buildExample(t)
	// One schedule, and a drain long enough at 30 % load: both schemes
	// deliver every message of it, once. The example opens a connection
	// per message, so a CPU too busy to accept them in time drops SYNs and
	// a message waits out TCP's SYN timeouts; only a trial flagged for it
	// runs again.
	testenv.Retry(t, 2, 0, func(a *testenv.Attempt) {
		trials := runExample(t, exampleExperiment("netns", fmt.Sprintf(`  dctcp: {cc: dctcp, ports: {marking: {ecn: {threshold: 30KB}}}}
  mine: {transport: {command: [%q]}}`, bin)))
		wantFlows(t, trials, "dctcp")
		wantFlows(t, trials, "mine")
		for _, scheme := range []string{"dctcp", "mine"} {
			a.Flagged(trials[scheme].Dir, trials[scheme].Fidelity)
			sched, set := transporttest.ReadTrial(t, trials[scheme].Dir)
			transporttest.DeliveredOnce(a, sched, set, nil)
		}
	})
}

// The example transport, in an image of its own (FROM scratch, built by
// the test), runs as every docker host's container.
func TestExampleTransportDocker(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireDocker(t)
	// Flows measured, not how fast: it runs beside the other waiting tests.
	t.Parallel()
	bin := buildExample(t)
	tag := fmt.Sprintf("fabric-example-transport:t%d", os.Getpid())
	dockerfile := []byte("FROM scratch\nCOPY fabric /transport\nCMD [\"/transport\"]\n")
	ctx := context.Background()
	d := &hosts.Docker{}
	if _, err := d.BuildImage(ctx, hosts.ImageBuild{Tag: tag, Binary: bin, Dockerfile: dockerfile}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.RemoveImage(context.Background(), tag); err != nil && !strings.Contains(err.Error(), "No such image") {
			t.Errorf("removing %s: %v", tag, err)
		}
	})
	trials := runExample(t, exampleExperiment("docker", fmt.Sprintf(`  mine-ct: {transport: {image: %q}}`, tag)))
	wantFlows(t, trials, "mine-ct")
}
