package cctest

import (
	"fmt"
	"math"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Marker sets CE on a random fraction of the ECN-capable TCP data segments
// that arrive at a host (tc ingress), independent of any queue.
type Marker struct {
	objs cemarkObjects
}

// MarkCE attaches a Marker to the host's veth, marking fraction (0..1) of the
// data segments it receives. It is removed when t ends.
func (h *Host) MarkCE(t testing.TB, fraction float64) *Marker {
	t.Helper()
	spec, err := loadCemark()
	if err != nil {
		t.Fatal(err)
	}
	below := uint32(math.Min(fraction, 1) * math.MaxUint32)
	if err := spec.Variables["mark_below"].Set(below); err != nil {
		t.Fatal(err)
	}
	m := &Marker{}
	if err := spec.LoadAndAssign(&m.objs, nil); err != nil {
		t.Fatalf("loading CE marker: %v", err)
	}
	t.Cleanup(func() { m.objs.Close() })
	l, err := h.Handle.LinkByName(h.If)
	if err != nil {
		t.Fatal(err)
	}
	clsact := &netlink.GenericQdisc{
		QdiscAttrs: netlink.QdiscAttrs{LinkIndex: l.Attrs().Index, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT},
		QdiscType:  "clsact",
	}
	if err := h.Handle.QdiscReplace(clsact); err != nil {
		t.Fatalf("%s: clsact: %v", h.NSName, err)
	}
	f := &netlink.BpfFilter{
		FilterAttrs: netlink.FilterAttrs{
			LinkIndex: l.Attrs().Index,
			Parent:    netlink.HANDLE_MIN_INGRESS,
			Handle:    1,
			Priority:  1,
			Protocol:  unix.ETH_P_ALL,
		},
		Fd:           m.objs.Cemark.FD(),
		Name:         "fabric-test-cemark",
		DirectAction: true,
	}
	if err := h.Handle.FilterAdd(f); err != nil {
		t.Fatalf("%s: CE marker filter: %v", h.NSName, err)
	}
	return m
}

// Counts returns how many ECT data segments the marker saw and marked.
func (m *Marker) Counts() (seen, marked uint64, err error) {
	for i, dst := range []*uint64{&seen, &marked} {
		if err := m.objs.Counts.Lookup(uint32(i), dst); err != nil {
			return 0, 0, fmt.Errorf("marker counts: %w", err)
		}
	}
	return seen, marked, nil
}
