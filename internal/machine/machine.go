// Package machine describes the computer a run ran on, so that a published
// figure says what machine it came from.
package machine

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
)

// Machine is the profile a run records in run.json.
type Machine struct {
	CPUs     int    `json:"cpus"`
	Model    string `json:"model,omitempty"`     // /proc/cpuinfo's model name
	MemoryMB int    `json:"memory_mb,omitempty"` // MemTotal
	// Virtual is the CPU's hypervisor flag: a virtual machine, whose
	// vCPUs the host may take away (steal).
	Virtual bool `json:"virtual,omitempty"`
}

// Read profiles this machine; what /proc does not say stays empty.
func Read() Machine {
	m := Machine{CPUs: runtime.NumCPU()}
	m.Model, m.Virtual = cpuInfo("/proc/cpuinfo")
	m.MemoryMB = memTotalMB("/proc/meminfo")
	return m
}

// String is one line: "2 CPUs (AMD EPYC 7B13, virtual), 7.8 GiB".
func (m Machine) String() string {
	var notes []string
	if m.Model != "" {
		notes = append(notes, m.Model)
	}
	if m.Virtual {
		notes = append(notes, "virtual")
	}
	s := fmt.Sprintf("%d CPUs", m.CPUs)
	if len(notes) > 0 {
		s += " (" + strings.Join(notes, ", ") + ")"
	}
	if m.MemoryMB > 0 {
		s += fmt.Sprintf(", %.1f GiB", float64(m.MemoryMB)/1024)
	}
	return s
}

// cpuInfo reads the first processor's model name and whether its flags
// include hypervisor.
func cpuInfo(path string) (model string, virtual bool) {
	f, err := os.Open(path)
	if err != nil {
		return "", false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20) // a flags line is long
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		switch strings.TrimSpace(key) {
		case "model name":
			if model == "" {
				model = strings.TrimSpace(val)
			}
		case "flags":
			virtual = virtual || strings.Contains(" "+val+" ", " hypervisor ")
		}
	}
	return model, virtual
}

// memTotalMB is MemTotal from meminfo, in MiB.
func memTotalMB(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			kb, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(rest), " kB"))
			if err == nil {
				return kb / 1024
			}
		}
	}
	return 0
}
