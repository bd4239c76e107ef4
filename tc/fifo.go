package tc

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// fifoLeaf is a bfifo (byte limit) or pfifo (packet limit) qdisc.
type fifoLeaf struct {
	ifindex        int
	handle, parent uint32
	limit          uint32
	packets        bool
}

func (f fifoLeaf) kind() string {
	if f.packets {
		return "pfifo"
	}
	return "bfifo"
}

// replaceFifo creates or replaces a fifo leaf and checks the limit the
// kernel echoes back. netlink's GenericQdisc sends no TCA_OPTIONS, and a
// fifo without options silently takes txqueuelen packets as its limit, so
// we encode struct tc_fifo_qopt { __u32 limit; } ourselves and make the
// kernel prove it took it (NLM_F_ECHO returns the new qdisc as dumped).
func (c *nsConn) replaceFifo(f fifoLeaf) error {
	err := c.sendFifo(f)
	if errors.Is(err, unix.EINVAL) {
		// The kernel will not change a qdisc's kind in place (bfifo ↔ pfifo
		// when a buffer switches between bytes and packets): delete the old
		// leaf, which HTB replaces by a default fifo meanwhile, and retry.
		old := &netlink.GenericQdisc{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: f.ifindex, Handle: f.handle, Parent: f.parent}}
		if c.h.QdiscDel(old) == nil {
			err = c.sendFifo(f)
		}
	}
	return err
}

func (c *nsConn) sendFifo(f fifoLeaf) error {
	req := c.request(unix.RTM_NEWQDISC, unix.NLM_F_CREATE|unix.NLM_F_REPLACE|unix.NLM_F_ACK|unix.NLM_F_ECHO)
	req.AddData(&nl.TcMsg{Family: nl.FAMILY_ALL, Ifindex: int32(f.ifindex), Handle: f.handle, Parent: f.parent})
	req.AddData(nl.NewRtAttr(nl.TCA_KIND, nl.ZeroTerminated(f.kind())))
	opt := make([]byte, 4)
	binary.NativeEndian.PutUint32(opt, f.limit)
	req.AddData(nl.NewRtAttr(nl.TCA_OPTIONS, opt))
	msgs, err := req.Execute(unix.NETLINK_ROUTE, unix.RTM_NEWQDISC)
	if err != nil {
		return fmt.Errorf("%s %x: limit %d: %w", f.kind(), f.handle>>16, f.limit, err)
	}
	for _, m := range msgs {
		kind, limit, ok := parseFifo(m)
		if ok && kind == f.kind() && limit == f.limit {
			return nil
		}
		return fmt.Errorf("%s %x: asked for limit %d, kernel reports %s limit %d", f.kind(), f.handle>>16, f.limit, kind, limit)
	}
	// No echo (never seen on Linux ≥ 2.6, kept for safety): read it back.
	return c.checkFifo(f)
}

// checkFifo dumps the qdiscs of the link and compares the fifo's limit.
func (c *nsConn) checkFifo(f fifoLeaf) error {
	kind, limit, err := c.fifoLimit(f.ifindex, f.handle)
	if err != nil {
		return err
	}
	if kind != f.kind() || limit != f.limit {
		return fmt.Errorf("%s %x: asked for limit %d, kernel reports %s limit %d", f.kind(), f.handle>>16, f.limit, kind, limit)
	}
	return nil
}

// fifoLimit reads the kind and limit of the fifo with handle on ifindex.
func (c *nsConn) fifoLimit(ifindex int, handle uint32) (string, uint32, error) {
	req := c.request(unix.RTM_GETQDISC, unix.NLM_F_DUMP)
	req.AddData(&nl.TcMsg{Family: nl.FAMILY_ALL, Ifindex: int32(ifindex)})
	msgs, err := req.Execute(unix.NETLINK_ROUTE, unix.RTM_NEWQDISC)
	if err != nil {
		return "", 0, fmt.Errorf("dump qdiscs: %w", err)
	}
	for _, m := range msgs {
		tm := nl.DeserializeTcMsg(m)
		if int(tm.Ifindex) != ifindex || tm.Handle != handle {
			continue
		}
		kind, limit, _ := parseFifo(m)
		return kind, limit, nil
	}
	return "", 0, fmt.Errorf("qdisc %x: not found on ifindex %d", handle>>16, ifindex)
}

// parseFifo extracts TCA_KIND and the tc_fifo_qopt limit from a qdisc
// message.
func parseFifo(m []byte) (kind string, limit uint32, ok bool) {
	if len(m) < nl.SizeofTcMsg {
		return "", 0, false
	}
	attrs, err := nl.ParseRouteAttr(m[nl.SizeofTcMsg:])
	if err != nil {
		return "", 0, false
	}
	for _, a := range attrs {
		switch a.Attr.Type {
		case nl.TCA_KIND:
			kind = unix.ByteSliceToString(a.Value)
		case nl.TCA_OPTIONS:
			if len(a.Value) >= 4 {
				limit = binary.NativeEndian.Uint32(a.Value)
				ok = true
			}
		}
	}
	return kind, limit, ok
}

// ReplaceBfifo puts a byte-limited fifo with handle under parent on
// ifindex in the namespace at netnsPath, and checks the limit the kernel
// took. Other packages that build queues (the HULL pacer's bucket) use it
// instead of encoding tc_fifo_qopt themselves.
func ReplaceBfifo(netnsPath string, ifindex int, handle, parent, limit uint32) error {
	c, err := openNS(netnsPath)
	if err != nil {
		return err
	}
	defer c.Close()
	return c.replaceFifo(fifoLeaf{ifindex: ifindex, handle: handle, parent: parent, limit: limit})
}
