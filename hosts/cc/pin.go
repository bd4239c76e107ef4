package cc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// PinRoot is where labs keep BPF objects that must outlive the process that
// created them: PinRoot/<lab>/cc_<name> holds a congestion control's
// struct_ops link.
const PinRoot = "/sys/fs/bpf/fabric"

const bpffsMount = "/sys/fs/bpf"

// Register makes congestion control name available for lab until
// Unregister(lab), independent of the calling process: for `fabric up`,
// which exits while the lab runs. A BPF registration is held by a pin in
// bpffs; a kernel-provided one needs nothing. Calling it again for the same
// lab and name is harmless.
func Register(ctx context.Context, lab, name string) (Info, error) {
	dir, err := labDir(lab)
	if err != nil {
		return Info{}, err
	}
	reg, info, err := acquire(ctx, name)
	if err != nil || reg == nil {
		return info, err
	}
	defer reg.close() // the pin keeps the link; our descriptors can go
	if err := mountBPFFS(); err != nil {
		return Info{}, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return Info{}, fmt.Errorf("lab %s: %w", lab, err)
	}
	path := filepath.Join(dir, pinPrefix+name)
	if err := reg.link.Pin(path); err != nil {
		if !errors.Is(err, os.ErrExist) {
			return Info{}, fmt.Errorf("lab %s: pinning %s: %w", lab, name, err)
		}
		// Pinned by an earlier Register of this lab: that pin keeps the
		// same registration alive (acquire adopted it), nothing to do.
	}
	return info, nil
}

const pinPrefix = "cc_"

// Registered lists the congestion controls pinned for lab.
func Registered(lab string) ([]string, error) {
	dir, err := labDir(lab)
	if err != nil {
		return nil, err
	}
	paths, err := filepath.Glob(filepath.Join(dir, pinPrefix+"*"))
	if err != nil {
		return nil, err
	}
	var names []string
	for _, p := range paths {
		names = append(names, strings.TrimPrefix(filepath.Base(p), pinPrefix))
	}
	return names, nil
}

// Unregister drops lab's holds on BPF congestion controls. The kernel
// removes each one whose last holder this was. The lab's pin directory is
// removed when nothing else (another package's pins) is left in it.
func Unregister(lab string) error {
	dir, err := labDir(lab)
	if err != nil {
		return err
	}
	names, err := Registered(lab)
	if err != nil {
		return err
	}
	var errs []error
	for _, n := range names {
		path := filepath.Join(dir, pinPrefix+n)
		l, err := link.LoadPinnedLink(path, nil)
		if err != nil {
			// Not a link (or unreadable): remove the file all the same.
			if rmErr := os.Remove(path); rmErr != nil && !errors.Is(rmErr, os.ErrNotExist) {
				errs = append(errs, fmt.Errorf("lab %s: unpinning %s: %w", lab, n, rmErr))
			}
			continue
		}
		if err := l.Unpin(); err != nil {
			errs = append(errs, fmt.Errorf("lab %s: unpinning %s: %w", lab, n, err))
		}
		l.Close()
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, unix.ENOTEMPTY) {
		errs = append(errs, fmt.Errorf("lab %s: %w", lab, err))
	}
	return errors.Join(errs...)
}

func labDir(lab string) (string, error) {
	if lab == "" || lab == "." || lab == ".." || strings.ContainsAny(lab, "/\x00") {
		return "", fmt.Errorf("lab name %q cannot name a directory", lab)
	}
	// bpffs refuses names containing '.' (EPERM), and lab names may have
	// them; escape reversibly so that "a.b" and "a_b" stay distinct.
	esc := strings.NewReplacer("_", "__", ".", "_d").Replace(lab)
	return filepath.Join(PinRoot, esc), nil
}

// mountBPFFS mounts bpffs on /sys/fs/bpf when nothing has (systemd usually
// does; minimal VMs and containers often do not).
func mountBPFFS() error {
	var st unix.Statfs_t
	if err := unix.Statfs(bpffsMount, &st); err == nil && st.Type == unix.BPF_FS_MAGIC {
		return nil
	}
	if err := unix.Mount("bpf", bpffsMount, "bpf", 0, "mode=0700"); err != nil {
		return fmt.Errorf("mounting bpffs on %s (to keep BPF objects after this process exits): %w", bpffsMount, err)
	}
	return nil
}
