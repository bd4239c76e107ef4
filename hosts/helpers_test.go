package hosts_test

import (
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/fabric-emu/fabric/hosts"
	"github.com/fabric-emu/fabric/hosts/hoststest"
	"github.com/fabric-emu/fabric/internal/netnsutil"
)

func TestMain(m *testing.M) { hoststest.Main(m) }

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
