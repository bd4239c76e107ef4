package emu

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// inNetNS runs fn on a thread that has entered the namespace at path, and
// returns the thread to its own namespace afterwards. If the thread cannot
// be returned it stays locked, so the Go runtime discards it rather than
// letting another goroutine run in the wrong namespace.
func inNetNS(path string, fn func() error) error {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer orig.Close()
	target, err := netns.GetFromPath(path)
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("open namespace %s: %w", path, err)
	}
	defer target.Close()
	if err := netns.Set(target); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("enter namespace %s: %w", path, err)
	}
	fnErr := fn()
	if err := netns.Set(orig); err != nil {
		return errors.Join(fnErr, fmt.Errorf("leave namespace %s: %w", path, err))
	}
	runtime.UnlockOSThread()
	return fnErr
}

// newNetNS creates a namespace bind-mounted at path and runs fn inside it.
func newNetNS(path string, fn func() error) error {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer orig.Close()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		runtime.UnlockOSThread()
		return err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("namespace %s: %w", path, err)
	}
	f.Close()
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		os.Remove(path)
		runtime.UnlockOSThread()
		return fmt.Errorf("unshare: %w", err)
	}
	self := fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid())
	err = unix.Mount(self, path, "", unix.MS_BIND, "")
	if err == nil {
		err = fn()
	} else {
		err = fmt.Errorf("bind-mount namespace at %s: %w", path, err)
	}
	if serr := netns.Set(orig); serr != nil {
		return errors.Join(err, serr) // thread stays locked and dies with the goroutine
	}
	runtime.UnlockOSThread()
	return err
}

// removeNetNS unmounts and deletes a named namespace. The kernel frees the
// namespace, and the veth ends inside it, once nothing holds it.
func removeNetNS(path string) error {
	err := unix.Unmount(path, unix.MNT_DETACH)
	if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// ensureSysctl writes a sysctl only when it differs: a new namespace
// inherits much of the root namespace's IPv4 settings, reading is cheap,
// and writes such as ip_forward cost close to 100 µs, which matters across
// a thousand namespaces.
func ensureSysctl(key, value string) error {
	if b, err := os.ReadFile(sysctlPath(key)); err == nil && strings.TrimSpace(string(b)) == value {
		return nil
	}
	return writeSysctl(key, value)
}

func sysctlPath(key string) string {
	if strings.Contains(key, "/") {
		return "/proc/sys/" + key
	}
	return "/proc/sys/" + strings.ReplaceAll(key, ".", "/")
}

// writeSysctl sets a sysctl in the calling thread's namespace. Keys may
// use dots or slashes.
func writeSysctl(key, value string) error {
	if err := os.WriteFile(sysctlPath(key), []byte(value), 0o644); err != nil {
		return fmt.Errorf("sysctl %s=%s: %w", key, value, err)
	}
	return nil
}

// labNetNS lists the namespace files of lab ("" for every lab) under
// /run/netns, by name prefix.
func labNetNS(lab string) ([]string, error) {
	entries, err := os.ReadDir(netnsDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		l, ok := labOfNetNS(e.Name())
		if ok && (lab == "" || l == lab) {
			out = append(out, filepath.Join(netnsDir, e.Name()))
		}
	}
	return out, nil
}

// nsID identifies a namespace by device and inode, as /proc/PID/ns/net
// shows it.
type nsID struct{ dev, ino uint64 }

func statNS(path string) (nsID, bool) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return nsID{}, false
	}
	return nsID{st.Dev, st.Ino}, true
}

// processesIn returns the PIDs whose network namespace is one of ids:
// processes fabric started inside the lab (endpoints, `fabric exec`).
func processesIn(ids map[nsID]bool) []int {
	if len(ids) == 0 {
		return nil
	}
	entries, _ := os.ReadDir("/proc")
	self := os.Getpid()
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		if id, ok := statNS(fmt.Sprintf("/proc/%d/ns/net", pid)); ok && ids[id] {
			pids = append(pids, pid)
		}
	}
	return pids
}

// signalAll sends sig to each pid, ignoring processes that are gone.
func signalAll(pids []int, sig syscall.Signal) {
	for _, pid := range pids {
		_ = syscall.Kill(pid, sig)
	}
}
