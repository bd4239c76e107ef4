package delay

import (
	"encoding/binary"
	"fmt"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/xt"
	"golang.org/x/sys/unix"
)

// queueRules sends every IPv4 packet that arrives on line i's interface to
// netfilter queue i, at prerouting before anything else (raw priority), in
// the calling thread's namespace. The kernel has no nft queue expression
// here (CONFIG_NFT_QUEUE is off), so the rule uses xtables' NFQUEUE target
// through nftables' compat expression (CONFIG_NFT_COMPAT). Without the
// bypass flag a queue nobody listens to drops its packets: if the process
// holding the delay lines dies, delayed links carry nothing rather than
// carry it undelayed.
func queueRules(lines []Line) error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	t := c.AddTable(&nftables.Table{Family: nftables.TableFamilyIPv4, Name: "fabric_delay"})
	ch := c.AddChain(&nftables.Chain{Name: "delay", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityRaw})
	for i, l := range lines {
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: []expr.Any{
			&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifnameBytes(l.In)},
			&expr.Target{Name: "NFQUEUE", Rev: 3, Info: nfqInfo(uint16(i))},
		}})
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables: queue rules: %w", err)
	}
	return nil
}

// nfqInfo is struct xt_NFQ_info_v3 {u16 queuenum, queues_total, flags}
// (linux/netfilter/xt_NFQUEUE.h), padded to 8 bytes as xtables payloads
// must be.
func nfqInfo(queue uint16) *xt.Unknown {
	b := make([]byte, 8)
	binary.NativeEndian.PutUint16(b[0:], queue)
	binary.NativeEndian.PutUint16(b[2:], 1) // queues_total: one queue, no fanout
	info := xt.Unknown(b)
	return &info
}

// ifnameBytes is an interface name as the kernel compares it: IFNAMSIZ
// bytes, NUL-padded.
func ifnameBytes(name string) []byte {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	return b
}
