package endpoint

import (
	"context"
	"errors"
	"net"
	"os"
	"sync"
	"time"

	"fabric/internal/records"
)

// The static and permutation patterns: Flows long-lived TCP flows to each
// peer for Duration. They differ only in who chooses the peers: static
// sends N flows into one receiver (HULL §6.1), permutation gives every host
// one destination from a derangement (see Derangement). The receiving
// server records each flow and samples its throughput.
func runLongLived(ctx context.Context, cfg *Config, _ *records.Writer) error {
	ids := newIDs(cfg.Host, cfg.Pattern)
	dscp := cfg.DSCP.Default
	var conns []*net.TCPConn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	// Connect every flow first, so they all start together.
	for _, p := range cfg.Peers {
		for range cfg.Flows {
			c, _, err := dial(ctx, cfg, p, hello{Kind: kindSink, DSCP: dscp, FlowID: ids.next(), Pattern: string(cfg.Pattern), Host: cfg.Host}, dscp)
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			conns = append(conns, c)
		}
	}
	end := time.Now().Add(cfg.Duration)
	// A write blocked on a full socket buffer returns at the deadline.
	stop := context.AfterFunc(ctx, func() {
		for _, c := range conns {
			c.SetWriteDeadline(time.Now())
		}
	})
	defer stop()
	var wg sync.WaitGroup
	for _, c := range conns {
		c.SetWriteDeadline(end)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				if _, err := c.Write(payload); err != nil {
					if !errors.Is(err, os.ErrDeadlineExceeded) {
						cfg.Log.Warn("long-lived flow ended early", "peer", c.RemoteAddr(), "err", err)
					}
					return
				}
			}
		}()
	}
	wg.Wait()
	cfg.Log.Info(string(cfg.Pattern)+" done", "flows", len(conns))
	return nil
}
