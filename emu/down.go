package emu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fabric-emu/fabric/hosts"
	"github.com/fabric-emu/fabric/hosts/cc"
	"github.com/fabric-emu/fabric/internal/netnsutil"
	"github.com/fabric-emu/fabric/tc"
)

// Down removes everything lab made, from its state file when there is one
// and by name and label otherwise, so it also cleans up after an `up` that
// was killed part-way. Removing a lab that does not exist is not an error.
func Down(ctx context.Context, lab string) error {
	if err := RequireRoot(); err != nil {
		return err
	}
	// The agent first, while its pacers' NICs exist to be restored.
	errs := []error{stopAgent(lab)}
	st, _ := ReadState(lab)
	// Hosts of other runtimes first: removing a container ends its
	// processes the runtime's way.
	refs := map[string]hosts.Ref{}
	if st != nil {
		for _, r := range st.Hosts {
			refs[r.Node] = r
		}
	}
	for _, name := range hosts.RuntimeNames() {
		rt, _ := hosts.Lookup(name)
		left, err := rt.Leftovers(ctx, lab)
		errs = append(errs, err)
		for _, r := range left {
			refs[r.Node] = r
		}
	}
	for _, r := range refs {
		if rt, err := hosts.Lookup(r.Runtime); err == nil {
			if err := rt.Remove(ctx, r); err != nil {
				errs = append(errs, fmt.Errorf("host %s: %w", r.Node, err))
			}
		}
	}
	paths, err := netnsutil.LabPaths(lab)
	errs = append(errs, err)
	// Processes still inside the lab (endpoints, `fabric exec`) would keep
	// its namespaces, and their links, alive after the unmount.
	ids := map[nsID]bool{}
	for _, p := range paths {
		if id, ok := statNS(p); ok {
			ids[id] = true
		}
	}
	if pids := processesIn(ids); len(pids) > 0 {
		signalAll(pids, unix.SIGTERM)
		deadline := time.Now().Add(2 * time.Second)
		for len(pids) > 0 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
			pids = processesIn(ids)
		}
		signalAll(pids, unix.SIGKILL)
	}
	errs = append(errs, parallel(ctx, paths, func(_ context.Context, p string) error { return netnsutil.Remove(p) }))
	errs = append(errs, cc.Unregister(lab))
	errs = append(errs, tc.ForgetLab(lab)) // pinned maps under tc.BPFRoot/<lab>
	if err := os.RemoveAll(LabDir(lab)); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// DownAll removes every lab it can find: by state directory, by namespace
// name, by runtime label and by pinned BPF directory. It returns the labs
// it removed.
func DownAll(ctx context.Context) ([]string, error) {
	labs := map[string]bool{}
	names, err := List()
	for _, n := range names {
		labs[n] = true
	}
	paths, err2 := netnsutil.LabPaths("")
	for _, p := range paths {
		if l, ok := netnsutil.LabOf(filepath.Base(p)); ok {
			labs[l] = true
		}
	}
	for _, name := range hosts.RuntimeNames() {
		rt, _ := hosts.Lookup(name)
		left, _ := rt.Leftovers(ctx, "")
		for _, r := range left {
			labs[r.Lab] = true
		}
	}
	pinned, _ := tc.ListLabs()
	for _, l := range pinned {
		labs[l] = true
	}
	errs := []error{err, err2}
	var done []string
	for _, l := range sortedKeys(labs) {
		if err := Down(ctx, l); err != nil {
			errs = append(errs, fmt.Errorf("lab %s: %w", l, err))
		}
		done = append(done, l)
	}
	return done, errors.Join(errs...)
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
