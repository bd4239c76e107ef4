package hosts_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"golang.org/x/sys/unix"

	"github.com/fabric-emu/fabric/hosts"
	"github.com/fabric-emu/fabric/internal/netnsutil"
)

// Every resource these tests make is named with this prefix plus a random
// suffix: labs thrXXXX (so namespaces fab.thrXXXX.*, containers
// fab.thrXXXX.*) and images fabric-endpoint:thr-XXXX.
const testPrefix = "thr"

func uniqueName() string { return fmt.Sprintf("%s%04x", testPrefix, rand.Uint32()&0xffff) }

// fabricBinary builds a static fabric binary once per test process: the
// test executable is not fabric, and the docker image needs a static one.
var fabricBinary = sync.OnceValues(func() (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "fabric-thr-bin-")
	if err != nil {
		return "", err
	}
	binDirs = append(binDirs, dir)
	out := filepath.Join(dir, "fabric")
	cmd := exec.Command("go", "build", "-o", out, "./cmd/fabric")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/fabric: %v\n%s", err, b)
	}
	return out, nil
})

// binDirs and builtImages are removed by TestMain after all tests.
var (
	binDirs     []string
	builtImages []string
)

func TestMain(m *testing.M) {
	code := m.Run()
	for _, img := range builtImages {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := (&hosts.Docker{}).RemoveImage(ctx, img); err != nil {
			fmt.Fprintln(os.Stderr, "cleanup:", err)
		}
		cancel()
	}
	for _, d := range binDirs {
		os.RemoveAll(d)
	}
	os.Exit(code)
}

func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the working directory")
		}
		dir = parent
	}
}

// buildTestImage builds an endpoint image under a fresh tag from a freshly
// built binary; dockerfile nil means the real images/endpoint/Dockerfile.
func buildTestImage(t testing.TB, dockerfile []byte) string {
	t.Helper()
	t0 := time.Now()
	bin, err := fabricBinary()
	if err != nil {
		t.Fatal(err)
	}
	tag := "fabric-endpoint:" + testPrefix + "-" + uniqueName()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := (&hosts.Docker{}).BuildImage(ctx, hosts.ImageBuild{Tag: tag, Binary: bin, Dockerfile: dockerfile}); err != nil {
		t.Fatal(err)
	}
	builtImages = append(builtImages, tag)
	t.Logf("image %s: binary and image built in %s", tag, time.Since(t0).Round(time.Millisecond))
	return tag
}

// dockerClient is an independent view of the daemon, to check what the
// runtime did without asking the runtime.
func dockerClient(t *testing.T) *client.Client {
	t.Helper()
	cli, err := client.New(client.FromEnv)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// labContainers lists containers whose name starts with fab.<lab>., by
// name rather than by label, so a container with lost labels still counts.
func labContainers(t *testing.T, cli *client.Client, lab string) []string {
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

// assertNoNetNS checks that path is neither a file nor a mount point.
func assertNoNetNS(t *testing.T, path string) {
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

// nsInode is the inode of the network namespace file or /proc link at path.
func nsInode(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatalf("stat %s: %v", path, err)
	}
	return st.Ino
}

// newTestNetNS makes an empty namespace mounted at /run/netns/<name>,
// removed when the test ends.
func newTestNetNS(t *testing.T, name string) string {
	t.Helper()
	path := filepath.Join("/run/netns", name)
	if err := netnsutil.Create(path, func() error { return nil }); err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
	t.Cleanup(func() {
		if err := netnsutil.Remove(path); err != nil {
			t.Errorf("delete namespace %s: %v", name, err)
		}
	})
	return path
}

// dockerRef is a docker host of lab with a run directory of its own.
func dockerRef(t testing.TB, lab, node, image string) hosts.Ref {
	return hosts.Ref{
		Lab: lab, Node: node, NetNS: netnsutil.Path(lab, node),
		Runtime: "docker", Image: image, RunDir: t.TempDir(),
	}
}
