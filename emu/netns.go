package emu

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"fabric/internal/dirs"
)

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
	names, err := dirs.Names(netnsDir, func(e fs.DirEntry) bool {
		l, ok := labOfNetNS(e.Name())
		return ok && (lab == "" || l == lab)
	})
	for i, n := range names {
		names[i] = filepath.Join(netnsDir, n)
	}
	return names, err
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
