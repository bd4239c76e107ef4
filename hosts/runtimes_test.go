package hosts_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"fabric/emu"
	"fabric/hosts"
	"fabric/hosts/workload"
	"fabric/internal/records"
	"fabric/internal/testenv"
)

// TestBothRuntimes is the "Both runtimes" test: the same 4-host
// star lab runs the dynamic pattern for 5 s with runtime netns and with
// runtime docker; both produce flow records and both leave nothing behind
// after down. The docker case builds its own image first.
func TestBothRuntimes(t *testing.T) {
	testenv.RequireRoot(t)
	t.Run("netns", func(t *testing.T) {
		bin, err := fabricBinary()
		if err != nil {
			t.Fatal(err)
		}
		t.Setenv(hosts.EnvFabricBinary, bin)
		runDynamicOnStar(t, "runtime: netns")
	})
	t.Run("docker", func(t *testing.T) {
		testenv.RequireDocker(t)
		t0 := time.Now()
		image := buildTestImage(t, nil)
		runDynamicOnStar(t, "runtime: docker, image: "+image)
		t.Logf("docker runtime, including the image build: %s", time.Since(t0).Round(time.Millisecond))
	})
}

// runDynamicOnStar brings up a 4-host star with the given hosts settings,
// runs servers on h1–h3 and a dynamic client on h0 for 5 s, checks the
// records, takes the lab down and checks nothing is left. The endpoints use
// cubic, which is outside this kernel's tcp_allowed_congestion_control, and
// turn ECN on, so a container must let them configure their namespace
// (CAP_NET_ADMIN, writable /proc/sys/net) as a netns host does.
func runDynamicOnStar(t *testing.T, hostsSpec string) {
	lab := uniqueName()
	spec, err := emu.Parse(lab+".yaml", []byte(fmt.Sprintf(
		"name: %s\ntopology: {kind: star, hosts: 4}\nlinks: {rate: 100Mbit}\nhosts: {%s}\n", lab, hostsSpec)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	t0 := time.Now()
	l, err := emu.Up(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	downed := false
	t.Cleanup(func() {
		if !downed {
			emu.Down(context.Background(), lab)
		}
	})
	tUp := time.Since(t0)

	// The run directory must be the lab's: on docker hosts it is the only
	// directory of this machine the container sees (at the same path).
	// The workload is copied in for the same reason.
	ref0, err := hosts.HostOf(l, "h0")
	if err != nil {
		t.Fatal(err)
	}
	run := filepath.Join(ref0.RunDir, "run")
	cdf := filepath.Join(run, "hull_1k_10m.cdf")
	if err := copyWorkload("hull_1k_10m", cdf); err != nil {
		t.Fatal(err)
	}
	logs := t.TempDir()
	addr := map[string]string{}
	for _, h := range l.Graph.Hosts() {
		addr[h.Name] = h.Addr.String()
	}

	start := func(node string, args ...string) hosts.Process {
		t.Helper()
		ref, err := hosts.HostOf(l, node)
		if err != nil {
			t.Fatal(err)
		}
		p, err := hosts.StartFabric(ctx, ref, append([]string{"endpoint"}, args...), filepath.Join(logs, node+"-"+args[0]+".log"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Signal(syscall.SIGKILL); p.Wait() })
		return p
	}
	servers := map[string]hosts.Process{}
	for _, h := range []string{"h1", "h2", "h3"} {
		servers[h] = start(h, "server", "--host", h, "--run-dir", run, "--cc", "cubic", "--ecn", "on")
	}
	t1 := time.Now()
	client := start("h0", "dynamic", "--host", "h0", "--run-dir", run, "--seed", "7",
		"--workload", cdf, "--load", "0.3", "--link-rate", "100Mbit", "--duration", "5s", "--cc", "cubic", "--ecn", "on",
		"--peer", "h1="+addr["h1"], "--peer", "h2="+addr["h2"], "--peer", "h3="+addr["h3"])
	if err := waitWithin(t, client, 60*time.Second); err != nil {
		t.Fatalf("dynamic client: %v\n%s", err, readLog(logs, "h0-dynamic.log"))
	}
	tTraffic := time.Since(t1)
	for h, s := range servers {
		if err := s.Signal(syscall.SIGTERM); err != nil {
			t.Fatalf("stop server on %s: %v", h, err)
		}
		if err := waitWithin(t, s, 15*time.Second); err != nil {
			t.Fatalf("server on %s after SIGTERM: %v, want exit 0\n%s", h, err, readLog(logs, h+"-server.log"))
		}
	}

	set, err := records.ReadDir(run)
	if err != nil {
		t.Fatal(err)
	}
	var bytes int64
	for _, f := range set.Flows {
		if f.Pattern != "dynamic" || f.Dst != "h0" || servers[f.Src] == nil || f.Bytes != f.Size || f.EndNS <= f.StartNS || f.CC != "cubic" {
			t.Fatalf("unexpected flow record %+v", f)
		}
		bytes += f.Bytes
	}
	if len(set.Flows) < 10 {
		t.Fatalf("%d flow records, want at least 10 from 5 s at 30%% load", len(set.Flows))
	}
	t.Logf("%d flow records, %.1f MB; first: %s", len(set.Flows), float64(bytes)/1e6, firstLine(filepath.Join(run, records.FileName("h0.dynamic"))))

	// The endpoints set ECN in their own namespace; Exec, which enters the
	// host's namespace for either runtime, reads it back.
	var ecn strings.Builder
	if err := hosts.Exec(ctx, ref0, []string{"cat", "/proc/sys/net/ipv4/tcp_ecn"}, nil, &ecn, &ecn); err != nil || strings.TrimSpace(ecn.String()) != "1" {
		t.Errorf("tcp_ecn on h0 = %q (%v), want 1 as the endpoint set it", ecn.String(), err)
	}

	t2 := time.Now()
	if err := emu.Down(context.Background(), lab); err != nil {
		t.Fatal(err)
	}
	downed = true
	tDown := time.Since(t2)
	t.Logf("up %s, traffic (5 s + drain) %s, down %s", tUp.Round(time.Millisecond), tTraffic.Round(time.Millisecond), tDown.Round(time.Millisecond))

	// Nothing left: namespaces, containers, the lab directory.
	if left, _ := filepath.Glob(emu.NetNSPath(lab, "*")); len(left) > 0 {
		t.Errorf("namespaces left after down: %v", left)
	}
	for _, h := range l.Graph.Hosts() {
		assertNoNetNS(t, emu.NetNSPath(lab, h.Name))
	}
	if _, err := os.Stat(emu.LabDir(lab)); !os.IsNotExist(err) {
		t.Errorf("lab directory %s left (err=%v)", emu.LabDir(lab), err)
	}
	if spec.Hosts.Runtime == "docker" {
		if names := labContainers(t, dockerClient(t), lab); len(names) > 0 {
			t.Errorf("containers left after down: %v", names)
		}
		if left, err := (&hosts.Docker{}).Leftovers(context.Background(), lab); err != nil || len(left) > 0 {
			t.Errorf("Leftovers after down = %v, %v", left, err)
		}
	}
}

// copyWorkload copies a workload CDF, found by name the way the engine
// finds it (shared/workloads above the working directory, or
// $FABRIC_WORKLOADS), to dst.
func copyWorkload(name, dst string) error {
	src, err := workload.Find(name, nil)
	if err != nil {
		return err
	}
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o644)
}

func readLog(dir, name string) string {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return err.Error()
	}
	return string(b)
}

func firstLine(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return line
}
