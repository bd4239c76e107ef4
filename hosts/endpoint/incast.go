package endpoint

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"fabric/internal/records"
)

// The incast pattern: the aggregator keeps one persistent connection per
// worker (a server), and each query writes a request for Size bytes to
// every worker at once. The query completes with the last response; each
// response is also recorded as a flow that starts with the query.

type worker struct {
	c    *net.TCPConn
	name string
	cc   string
	buf  []byte
	end  int64
	err  error
}

func runIncast(ctx context.Context, cfg *Config, w *records.Writer) error {
	size := int64(cfg.Size)
	dscp := cfg.DSCP.For(size)
	workers := make([]*worker, 0, len(cfg.Peers))
	defer func() {
		for _, wk := range workers {
			wk.c.Close()
		}
	}()
	for _, p := range cfg.Peers {
		c, a, err := dial(ctx, cfg, p, hello{Kind: kindReqResp, DSCP: dscp, Pattern: string(cfg.Pattern), CC: cfg.CC, Host: cfg.Host}, dscp)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		workers = append(workers, &worker{c: c, name: a.Host, cc: a.CC, buf: make([]byte, min(size, 256<<10))})
	}
	var deadline time.Time
	if cfg.Duration > 0 {
		deadline = time.Now().Add(cfg.Duration)
	}
	ids := newIDs(cfg.Host, cfg.Pattern)
	var hdr [8]byte
	putRequest(&hdr, size)
	done := 0
	for q := 0; cfg.Rounds == 0 || q < cfg.Rounds; q++ {
		if ctx.Err() != nil || (!deadline.IsZero() && time.Now().After(deadline)) {
			break
		}
		start := time.Now().UnixNano()
		for _, wk := range workers {
			if _, err := wk.c.Write(hdr[:]); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("query %d to %s: %w", q, wk.name, err)
			}
		}
		var wg sync.WaitGroup
		for _, wk := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				wk.err = readN(wk.c, wk.buf, size)
				wk.end = time.Now().UnixNano()
			}()
		}
		wg.Wait()
		qid := ids.next()
		last := start
		for _, wk := range workers {
			if wk.err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("query %d from %s: %w", q, wk.name, wk.err)
			}
			last = max(last, wk.end)
			w.Flow(records.Flow{ID: ids.next(), Pattern: string(Incast), Src: wk.name, Dst: cfg.Host,
				Size: size, Bytes: size, DSCP: uint8(dscp), CC: wk.cc, StartNS: start, EndNS: wk.end})
		}
		w.Query(records.Query{ID: qid, Aggregator: cfg.Host, Workers: len(workers), Size: size, StartNS: start, EndNS: last})
		done++
		if cfg.Gap > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(cfg.Gap):
			}
		}
	}
	cfg.Log.Info("incast done", "queries", done, "workers", len(workers), "size", cfg.Size)
	return nil
}

// readN reads exactly n bytes into buf, reusing it.
func readN(r io.Reader, buf []byte, n int64) error {
	for n > 0 {
		m, err := r.Read(buf[:min(n, int64(len(buf)))])
		n -= int64(m)
		if err != nil && n > 0 {
			return err
		}
	}
	return nil
}
