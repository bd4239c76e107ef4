package emu

import (
	"fmt"
	"os"
	"strings"
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
