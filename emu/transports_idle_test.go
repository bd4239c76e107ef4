package emu_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fabric-emu/fabric/emu"
	"github.com/fabric-emu/fabric/emu/emutest"
	"github.com/fabric-emu/fabric/hosts"
	"github.com/fabric-emu/fabric/hosts/hoststest"
	"github.com/fabric-emu/fabric/hosts/transport"
	"github.com/fabric-emu/fabric/hosts/transport/builtin"
)

// TestIdleTransportsSleep runs each built-in transport as its process on
// two hosts of a lab, one sending the other a few messages soon after the
// start and one more seconds later, and counts the processes' wake-ups
// (their threads' context switches) in two idle seconds: one while the
// last message is still to come, one after everything is delivered. An
// idle transport has nothing to time and no packet to handle, so its own
// code wakes nothing; the bound leaves the Go runtime one wake-up per
// process and second. The transports run at once, each on a pair of
// hosts of its own: a process's wake-ups are its own threads'.
func TestIdleTransportsSleep(t *testing.T) {
	names := builtin.Names()
	lab := emutest.Up(t, fmt.Sprintf("name: tidle\ntopology: {kind: star, hosts: %d}\nlinks: {rate: 10Mbit}\n", 2*len(names)+1))
	bin, err := hoststest.FabricBinary()
	if err != nil {
		t.Fatal(err)
	}
	old, had := os.LookupEnv(hosts.EnvFabricBinary)
	os.Setenv(hosts.EnvFabricBinary, bin) // not t.Setenv: the subtests run in parallel
	t.Cleanup(func() {
		if had {
			os.Setenv(hosts.EnvFabricBinary, old)
		} else {
			os.Unsetenv(hosts.EnvFabricBinary)
		}
	})
	for i, tr := range names {
		t.Run(tr, func(t *testing.T) {
			t.Parallel()
			idleSeconds(t, lab, tr, fmt.Sprintf("h%d", 2*i+1), fmt.Sprintf("h%d", 2*i+2))
		})
	}
}

// idleSeconds runs transport tr on hosts a and b, a sending b, and checks
// their wake-ups in an idle second before the last message and one after
// it.
func idleSeconds(t *testing.T, lab *emu.Lab, tr, a, b string) {
	dir := t.TempDir()
	start := time.Now().Add(2 * time.Second) // time for both to get ready
	h2 := lab.Host(b).Addr()
	var sched []transport.Message
	size := int64(20000) // several packets, so that the transports' timers run
	if tr == "udp" {
		size = 1400 // one datagram, all udp carries
	}
	for i, at := range []time.Duration{100 * time.Millisecond, 150 * time.Millisecond, 200 * time.Millisecond, 3 * time.Second} {
		sched = append(sched, transport.Message{ID: uint64(i + 1), TimeNS: at.Nanoseconds(), Src: a, Dst: b,
			DstAddr: h2, Size: size, Pattern: "dynamic"})
	}
	schedFile := filepath.Join(dir, "schedule.jsonl")
	f, err := os.Create(schedFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := transport.WriteSchedule(f, sched); err != nil {
		t.Fatal(err)
	}
	f.Close()
	var peers []transport.Peer
	for _, h := range []string{"h0", a, b} {
		peers = append(peers, transport.Peer{Name: h, Addr: lab.Host(h).Addr()})
	}
	var procs []hosts.Process
	for _, h := range []string{a, b} {
		env := transport.Env{Contract: transport.Version, Host: h, Addr: lab.Host(h).Addr(), Peers: peers, Schedule: schedFile,
			Records: filepath.Join(dir, transport.FileName(h)), RunDir: dir, StartNS: start.UnixNano(), Duration: 3500 * time.Millisecond,
			LinkRate: 10e6, MTU: 1500, RTT: time.Millisecond, Seed: 1}
		ref, err := lab.Host(h).Ref()
		if err != nil {
			t.Fatal(err)
		}
		bin, err := hosts.FabricIn(ref)
		if err != nil {
			t.Fatal(err)
		}
		p, err := hosts.StartCommand(context.Background(), ref, hosts.Command{Argv: []string{bin, "transport", tr},
			Env: env.Environ(), Log: filepath.Join(dir, h+".log")})
		if err != nil {
			t.Fatal(err)
		}
		procs = append(procs, p)
	}
	stop := func() {
		for _, p := range procs {
			p.Signal(syscall.SIGTERM)
			p.Wait()
		}
	}
	defer stop()
	// The first three messages are delivered by 1 s after the start; the
	// last is due at 3 s, and delivered by 4 s. The schedule ends at 3.5 s,
	// when each transport flushes its records and writes them through from
	// then on (transport.Writer): its one timed event, and the Go runtime's
	// threads wake a few times around it, so the second idle second starts
	// half a second later.
	for _, phase := range []struct {
		name string
		at   time.Duration
	}{{"before the last message", time.Second}, {"after the last message", 4 * time.Second}} {
		time.Sleep(time.Until(start.Add(phase.at)))
		woke, cpu := idleSecond(t, procs)
		t.Logf("%s, %s: %d wake-ups and %v of CPU over an idle second (%s, %s)", tr, phase.name, woke, cpu, a, b)
		if woke > len(procs) {
			t.Errorf("%s %s: the idle processes woke %d times in a second, want at most %d", tr, phase.name, woke, len(procs))
		}
	}
	stop()
	set, err := transport.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(set.Flows) != len(sched) {
		t.Errorf("%s delivered %d of %d messages", tr, len(set.Flows), len(sched))
	}
}

// idleSecond counts the context switches of every thread of procs, and
// their CPU time, over one second.
func idleSecond(t *testing.T, procs []hosts.Process) (int, time.Duration) {
	t.Helper()
	count := func() (int, time.Duration) {
		n, cpu := 0, time.Duration(0)
		for _, p := range procs {
			tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", p.PID()))
			for _, f := range tasks {
				b, err := os.ReadFile(f)
				if err != nil {
					continue // the thread has ended
				}
				for line := range strings.Lines(string(b)) {
					if k, v, ok := strings.Cut(line, ":"); ok && strings.HasSuffix(k, "ctxt_switches") {
						c, _ := strconv.Atoi(strings.TrimSpace(v))
						n += c
					}
				}
			}
			cpu += procCPU(t, p.PID())
		}
		return n, cpu
	}
	n0, cpu0 := count()
	time.Sleep(time.Second)
	n1, cpu1 := count()
	return n1 - n0, cpu1 - cpu0
}

// procCPU is a process's user and system time (10 ms ticks).
func procCPU(t *testing.T, pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	ut, _ := strconv.Atoi(f[11])
	st, _ := strconv.Atoi(f[12])
	return time.Duration(ut+st) * 10 * time.Millisecond
}
