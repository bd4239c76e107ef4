package machine

import (
	"os"
	"path/filepath"
	"testing"
)

func TestReadFiles(t *testing.T) {
	dir := t.TempDir()
	cpuinfo := filepath.Join(dir, "cpuinfo")
	meminfo := filepath.Join(dir, "meminfo")
	os.WriteFile(cpuinfo, []byte("processor\t: 0\nmodel name\t: Test CPU 9000\nflags\t\t: fpu sse hypervisor avx\n\nprocessor\t: 1\nmodel name\t: Other\n"), 0o644)
	os.WriteFile(meminfo, []byte("MemFree:  100 kB\nMemTotal:        8048640 kB\n"), 0o644)
	model, virtual := cpuInfo(cpuinfo)
	if model != "Test CPU 9000" || !virtual {
		t.Errorf("cpuInfo = %q, %v; want the first model and virtual", model, virtual)
	}
	if mb := memTotalMB(meminfo); mb != 7860 {
		t.Errorf("memTotalMB = %d, want 7860", mb)
	}
	m := Machine{CPUs: 2, Model: model, MemoryMB: 7860, Virtual: true}
	if got, want := m.String(), "2 CPUs (Test CPU 9000, virtual), 7.7 GiB"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if m := Read(); m.CPUs < 1 {
		t.Errorf("Read().CPUs = %d", m.CPUs)
	}
}
