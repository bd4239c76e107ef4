package capture

import (
	"fmt"
	"runtime"

	"github.com/vishvananda/netns"
)

// InNetNS runs fn on an OS thread that has entered the network namespace at
// path ("/run/netns/NAME"). Sockets fn opens stay bound to that namespace
// after the thread leaves it, so fn can open a capture socket and return it.
//
// fn runs on a fresh goroutine with its thread locked. If the thread cannot
// return to its original namespace it stays locked, and the Go runtime
// destroys it when the goroutine exits, so no other goroutine ever runs in
// the wrong namespace.
func InNetNS(path string, fn func() error) error {
	target, err := netns.GetFromPath(path)
	if err != nil {
		return fmt.Errorf("network namespace %s: %w", path, err)
	}
	defer target.Close()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- fmt.Errorf("current network namespace: %w", err)
			return // thread stays locked and dies: its state is unknown
		}
		defer orig.Close()
		if err := netns.Set(target); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter %s: %w", path, err)
			return
		}
		ferr := fn()
		if err := netns.Set(orig); err != nil {
			errc <- fmt.Errorf("leave %s: %w (thread discarded)", path, err)
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}
