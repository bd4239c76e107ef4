package endpoint

import (
	"context"
	"errors"
	"fmt"
	"time"

	"fabric/hosts/cc"
	"fabric/internal/records"
)

// Run plays cfg's role until it is done (clients: Duration, then Drain for
// request/response) or ctx is cancelled (servers run until then). A
// cancelled context is a clean stop: records are flushed and Run returns
// nil. Configuration errors are *yamlfile.FieldError values.
//
// Run must execute in the host's network namespace: every socket it opens
// belongs to the namespace of the thread that opens it, and Go moves
// goroutines between threads, so run it in a process started inside the
// namespace (`fabric endpoint`), not from a thread switched with setns.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if err := cfg.ECN.apply(); err != nil {
		return err
	}
	if cfg.CC != "" {
		// Ensure holds the congestion control for this process's life:
		// on kernels without tcp_dctcp it registers (or shares) fabric's
		// BPF DCTCP, so "--cc dctcp" works wherever the lab runs.
		release, info, err := cc.Ensure(ctx, cfg.CC)
		if err != nil {
			return fmt.Errorf("congestion control %q: %w", cfg.CC, err)
		}
		defer release()
		cfg.Log.Debug("congestion control", "cc", info.String())
	}
	// One file per process: a host's server and its clients append to
	// different files, so their buffered writes never interleave.
	w, err := records.Create(cfg.RunDir, cfg.Host+"."+string(cfg.Pattern))
	if err != nil {
		return err
	}
	// Records are buffered; flushing once a second lets a run be watched
	// and bounds what a SIGKILL loses, at no cost on the traffic path.
	flushCtx, stopFlush := context.WithCancel(context.Background())
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-flushCtx.Done():
				return
			case <-t.C:
				w.Flush()
			}
		}
	}()

	var run func(context.Context, *Config, *records.Writer) error
	switch cfg.Pattern {
	case Server:
		run = runServer
	case Dynamic:
		run = runDynamic
	case Incast:
		run = runIncast
	case Static, Permutation:
		run = runLongLived
	case Probe:
		run = runProbe
	}
	err = run(ctx, &cfg, w)
	stopFlush()
	return errors.Join(err, w.Close())
}
