package emu

import (
	"context"
	"errors"
	"runtime"
	"sync"
)

// workers bounds parallelism: the work is syscalls, and more threads than
// a few per core only add contention on the rtnl lock.
func workers() int { return max(4, 2*runtime.NumCPU()) }

// parallel runs fn over items with a bounded pool, stopping at the first
// error or when ctx ends; fn gets a context that ends then too.
func parallel[T any](ctx context.Context, items []T, fn func(context.Context, T) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	ch := make(chan T)
	var wg sync.WaitGroup
	for w := 0; w < min(workers(), len(items)); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := range ch {
				if err := fn(ctx, it); err != nil {
					cancel(err)
				}
			}
		}()
	}
feed:
	for _, it := range items {
		select {
		case ch <- it:
		case <-ctx.Done():
			break feed
		}
	}
	close(ch)
	wg.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return ctx.Err()
}
