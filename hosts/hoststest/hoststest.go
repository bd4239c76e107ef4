// Package hoststest holds what tests of host runtimes share: names of
// their own, a fabric binary to start on hosts, host images built from it,
// and independent looks at what a runtime left (containers, namespace
// mounts). A test package that builds binaries or images runs Main as its
// TestMain, which removes them after the tests.
package hoststest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/fabric-emu/fabric/hosts"
	"github.com/fabric-emu/fabric/internal/testenv"
)

// Prefix starts the name of every resource these tests make: labs
// thrXXXX (so namespaces fab.thrXXXX.*, containers fab.thrXXXX.*) and
// images fabric-endpoint:thr-XXXX.
const Prefix = "thr"

// UniqueName is Prefix with a random suffix.
func UniqueName() string { return fmt.Sprintf("%s%04x", Prefix, rand.Uint32()&0xffff) }

// FabricBinary builds a static fabric binary once per test process: the
// test executable is not fabric, and a host image needs a static one.
var FabricBinary = sync.OnceValues(func() (string, error) {
	bin, remove, err := testenv.BuildFabric()
	if err == nil {
		mu.Lock()
		removals = append(removals, remove)
		mu.Unlock()
	}
	return bin, err
})

var (
	mu       sync.Mutex
	removals []func() // of binaries and images, after all tests (Main)
)

// Main is a TestMain that runs the tests, then removes the binaries and
// images they built.
func Main(m *testing.M) {
	code := m.Run()
	for _, remove := range removals {
		remove()
	}
	os.Exit(code)
}

// BuildImage builds a host image under a fresh tag from FabricBinary;
// dockerfile nil means the real images/host/Dockerfile. Main removes it.
func BuildImage(t testing.TB, dockerfile []byte) string {
	t.Helper()
	t0 := time.Now()
	bin, err := FabricBinary()
	if err != nil {
		t.Fatal(err)
	}
	tag := "fabric-endpoint:" + Prefix + "-" + UniqueName()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := (&hosts.Docker{}).BuildImage(ctx, hosts.ImageBuild{Tag: tag, Binary: bin, Dockerfile: dockerfile}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	removals = append(removals, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := (&hosts.Docker{}).RemoveImage(ctx, tag); err != nil {
			fmt.Fprintln(os.Stderr, "cleanup:", err)
		}
	})
	mu.Unlock()
	t.Logf("image %s: binary and image built in %s", tag, time.Since(t0).Round(time.Millisecond))
	return tag
}

// DockerClient is an independent view of the daemon, to check what the
// runtime did without asking the runtime.
func DockerClient(t testing.TB) *client.Client {
	t.Helper()
	cli, err := client.New(client.FromEnv)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// Containers lists containers whose name starts with fab.<lab>., by name
// rather than by label, so a container with lost labels still counts.
func Containers(t testing.TB, cli *client.Client, lab string) []string {
	t.Helper()
	list, err := cli.ContainerList(context.Background(), client.ContainerListOptions{
		All: true, Filters: client.Filters{}.Add("name", "fab."+lab+"."),
	})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range list.Items {
		names = append(names, strings.Join(c.Names, ","))
	}
	return names
}

// NoNetNS fails t unless path is neither a file nor a mount point.
func NoNetNS(t testing.TB, path string) {
	t.Helper()
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Errorf("%s still exists (err=%v)", path, err)
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(mounts), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == path {
			t.Errorf("%s is still mounted: %s", path, line)
		}
	}
}

// WaitWithin waits for p, failing t if it takes longer than d.
func WaitWithin(t testing.TB, p hosts.Process, d time.Duration) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- p.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		p.Signal(syscall.SIGKILL)
		t.Fatalf("process %d still running after %s", p.PID(), d)
		return nil
	}
}
