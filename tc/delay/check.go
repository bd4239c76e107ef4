package delay

import (
	"fmt"
	"sync"

	"github.com/fabric-emu/fabric/internal/netnsutil"
)

// Check reports whether this kernel can run delay lines: in a throwaway
// namespace it binds a netfilter queue and installs the rule that feeds
// it. It runs once per process.
var Check = sync.OnceValue(func() error {
	ns, err := netnsutil.Anonymous()
	if err != nil {
		return err
	}
	defer ns.Close()
	return netnsutil.DoHandle(ns, "delay check", func() error {
		q, err := openNFQ()
		if err != nil {
			return err
		}
		defer q.close()
		if err := q.bind(0, 16); err != nil {
			return fmt.Errorf("%w (CONFIG_NETFILTER_NETLINK_QUEUE)", err)
		}
		if err := queueRules([]Line{{In: "lo"}}); err != nil {
			return fmt.Errorf("%w (CONFIG_NFT_COMPAT, CONFIG_NETFILTER_XT_TARGET_NFQUEUE)", err)
		}
		return nil
	})
})
