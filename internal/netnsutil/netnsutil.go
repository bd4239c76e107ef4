// Package netnsutil runs code inside a network namespace. It is the one
// place in fabric that moves an OS thread between namespaces; everything
// else (lab build, capture, traffic, test fixtures) goes through it.
//
// The rule it keeps: fn runs on a goroutine whose thread is locked and has
// entered the namespace; sockets fn opens stay bound to that namespace after
// the thread leaves, and a child process forked by fn inherits it. If the
// thread cannot return to its own namespace it stays locked, so the Go
// runtime destroys it when the goroutine ends and no other goroutine ever
// runs in the wrong namespace.
package netnsutil

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Do runs fn inside the namespace bind-mounted at path.
func Do(path string, fn func() error) error {
	target, err := netns.GetFromPath(path)
	if err != nil {
		return fmt.Errorf("network namespace %s: %w", path, err)
	}
	defer target.Close()
	return DoHandle(target, path, fn)
}

// DoHandle runs fn inside the namespace of an open handle; name is used in
// errors.
func DoHandle(target netns.NsHandle, name string, fn func() error) error {
	return onLockedThread(func() error {
		if err := netns.Set(target); err != nil {
			return fmt.Errorf("enter %s: %w", name, err)
		}
		return fn()
	}, name)
}

// Create makes a new namespace, bind-mounts it at path (which must not
// exist) and runs fn inside it. On error the mount is left for the
// caller's rollback, which removes it with Remove.
func Create(path string, fn func() error) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return fmt.Errorf("namespace %s: %w", path, err)
	}
	f.Close()
	return onLockedThread(func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			os.Remove(path)
			return fmt.Errorf("unshare: %w", err)
		}
		self := fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid())
		if err := unix.Mount(self, path, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind-mount namespace at %s: %w", path, err)
		}
		return fn()
	}, path)
}

// Anonymous makes a network namespace that no path names and returns a
// handle to it; the kernel frees it, and everything in it, when the last
// handle closes. Probes use it for throwaway experiments.
func Anonymous() (netns.NsHandle, error) {
	ns := netns.None()
	err := onLockedThread(func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("unshare: %w", err)
		}
		var err error
		ns, err = netns.Get()
		return err
	}, "anonymous namespace")
	return ns, err
}

// Remove unmounts and deletes a named namespace. The kernel frees the
// namespace, and the interfaces inside it, once nothing holds it.
func Remove(path string) error {
	err := unix.Unmount(path, unix.MNT_DETACH)
	if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// onLockedThread runs body on a fresh goroutine with a locked thread and
// returns that thread to its original namespace afterwards.
func onLockedThread(body func() error, name string) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- fmt.Errorf("current network namespace: %w", err)
			return // thread stays locked and dies: its state is unknown
		}
		defer orig.Close()
		berr := body()
		if err := netns.Set(orig); err != nil {
			errc <- errors.Join(berr, fmt.Errorf("leave %s: %w (thread discarded)", name, err))
			return
		}
		runtime.UnlockOSThread()
		errc <- berr
	}()
	return <-errc
}

// WriteSysfs writes value to /sys/<rel> as the network namespace at path
// sees it. sysfs shows the devices of the namespace that mounted it, so
// the write happens on a thread that enters the namespace, takes a private
// mount namespace and mounts sysfs there; the thread is discarded after.
func WriteSysfs(path, rel, value string) error {
	target, err := netns.GetFromPath(path)
	if err != nil {
		return fmt.Errorf("network namespace %s: %w", path, err)
	}
	defer target.Close()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread's namespaces change for good
		errc <- writeSysfsHere(target, rel, value)
	}()
	return <-errc
}

func writeSysfsHere(target netns.NsHandle, rel, value string) error {
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("unshare mount namespace: %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("private mounts: %w", err)
	}
	if err := netns.Set(target); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "fabric-sysfs")
	if err != nil {
		return err
	}
	defer os.Remove(dir)
	if err := unix.Mount("sysfs", dir, "sysfs", 0, ""); err != nil {
		return fmt.Errorf("mount sysfs: %w", err)
	}
	defer unix.Unmount(dir, unix.MNT_DETACH)
	return os.WriteFile(filepath.Join(dir, rel), []byte(value), 0o644)
}
