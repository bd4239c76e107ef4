package tc

import (
	"runtime"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/fabric-emu/fabric/internal/testenv"
)

// The fifo limit must really reach the kernel: netlink's GenericQdisc
// sends no options, and the kernel then takes txqueuelen packets. This
// test shows both: our encoding is read back as asked; the library's is
// not.
func TestFifoLimitIsSet(t *testing.T) {
	testenv.RequireRoot(t)
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	ns, err := netns.New() // unnamed: gone when its last fd closes
	if err != nil {
		t.Fatal(err)
	}
	if err := netns.Set(orig); err != nil {
		t.Fatal(err)
	}
	runtime.UnlockOSThread()
	orig.Close()
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "f0", TxQLen: 1000}, PeerName: "f1"}); err != nil {
		t.Fatal(err)
	}
	link, err := h.LinkByName("f0")
	if err != nil {
		t.Fatal(err)
	}
	idx := link.Attrs().Index
	c, err := openNSHandle(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p := Port{MTU: 1500, Bands: 1, Buffer: Buffer{Bytes: 12345}, Rate: 100e6}
	if err := c.buildTree(idx, p); err != nil {
		t.Fatal(err)
	}
	kind, limit, err := c.fifoLimit(idx, leafQdisc(0))
	if err != nil || kind != "bfifo" || limit != 12345 {
		t.Fatalf("our bfifo: %s limit %d (%v), want bfifo limit 12345", kind, limit, err)
	}
	// Packets: pfifo with 30.
	if err := c.replaceFifo(fifoLeaf{ifindex: idx, handle: leafQdisc(0), parent: leafClass(0), limit: 30, packets: true}); err != nil {
		t.Fatal(err)
	}
	if kind, limit, _ := c.fifoLimit(idx, leafQdisc(0)); kind != "pfifo" || limit != 30 {
		t.Fatalf("our pfifo: %s limit %d, want pfifo 30", kind, limit)
	}
	// The library's generic qdisc: no options, so not our limit.
	g := &netlink.GenericQdisc{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: idx, Handle: leafQdisc(0), Parent: leafClass(0)}, QdiscType: "bfifo"}
	if err := h.QdiscDel(g); err != nil {
		t.Fatal(err)
	}
	if err := h.QdiscAdd(g); err != nil {
		t.Fatal(err)
	}
	kind, limit, _ = c.fifoLimit(idx, leafQdisc(0))
	t.Logf("netlink.GenericQdisc bfifo: limit %d bytes (txqueuelen × MTU), not a configured buffer", limit)
	if limit == 12345 || limit == 30 {
		t.Errorf("GenericQdisc kept limit %d: the check above proves nothing", limit)
	}
}
