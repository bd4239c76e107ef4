package netnsutil

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/vishvananda/netns"

	"github.com/fabric-emu/fabric/internal/testenv"
)

func TestCreateDoRemove(t *testing.T) {
	testenv.RequireRoot(t)
	path := filepath.Join("/run/netns", fmt.Sprintf("fab.tnsu%d.x", os.Getpid()))
	var inside netns.NsHandle
	err := Create(path, func() (err error) { inside, err = netns.Get(); return })
	if err != nil {
		t.Fatal(err)
	}
	defer inside.Close()
	t.Cleanup(func() { Remove(path) })
	self, _ := netns.Get()
	defer self.Close()
	if self.Equal(inside) {
		t.Fatal("Create ran fn in the caller's namespace")
	}
	var seen netns.NsHandle
	if err := Do(path, func() (err error) { seen, err = netns.Get(); return }); err != nil {
		t.Fatal(err)
	}
	defer seen.Close()
	if !seen.Equal(inside) {
		t.Fatal("Do ran fn outside the namespace")
	}
	if err := Remove(path); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("namespace file still there: %v", err)
	}
	if err := Do(path, func() error { return nil }); err == nil {
		t.Fatal("Do on a removed namespace succeeded")
	}
}
