package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fabric-emu/fabric/internal/netnsutil"

	"github.com/fabric-emu/fabric/emu"
	"github.com/fabric-emu/fabric/internal/testenv"
	"github.com/fabric-emu/fabric/internal/units"
	"github.com/fabric-emu/fabric/tc/pacer"
)

// TestMain lets this test binary stand in for the fabric binary when `up`
// re-executes itself as the pacer agent (os.Executable is the test binary).
func TestMain(m *testing.M) {
	if emu.IsAgent() {
		main()
	}
	removeState := testenv.OwnState()
	code := m.Run()
	removeState()
	if built.remove != nil {
		built.remove()
	}
	os.Exit(code)
}

// built is the fabric binary that the tests which need a real one share:
// built once for the package, on first use, not once per test.
var built struct {
	once   sync.Once
	path   string
	remove func()
	err    error
}

// fabricBinary is the package's build of the fabric command.
func fabricBinary(t *testing.T) string {
	t.Helper()
	built.once.Do(func() { built.path, built.remove, built.err = testenv.BuildFabric() })
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.path
}

// `fabric up` of a lab with pacers returns once the lab is up and leaves a
// process behind that runs the pacers' rate controllers; `fabric down`
// ends it. A second `up` of the same name fails in that process, and its
// error and exit code reach the caller.
func TestUpLeavesPacerAgent(t *testing.T) {
	testenv.RequireRoot(t)
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	name := "t5agent" + hex.EncodeToString(b)
	file := filepath.Join(t.TempDir(), "paced.yaml")
	src := fmt.Sprintf("name: %s\ntopology: {kind: star, hosts: 2}\nlinks: {rate: 100Mbit}\nhosts:\n  pacer: {rate_interval: 2ms}\n", name)
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	t.Cleanup(func() { emu.Down(context.Background(), name) })

	code, out := runFabric(ctx, "up", file)
	if code != exitOK || !strings.Contains(out, "HULL pacer on h0,h1") {
		t.Fatalf("up: exit %d\n%q", code, out)
	}
	h, err := emu.ReadAgent(name)
	if err != nil || h == nil {
		t.Fatalf("no agent recorded: %v", err)
	}
	if !h.Detached || h.PID == os.Getpid() || !h.Alive() {
		t.Fatalf("agent %+v: want a live detached process other than this one", h)
	}
	if code, out := runFabric(ctx, "status", name); code != exitOK || !strings.Contains(out, fmt.Sprintf("HULL pacers on h0,h1, process %d (running)", h.PID)) || !strings.Contains(out, "h1 bucket: R ") {
		t.Errorf("status: exit %d, want the pacer agent listed\n%s", code, out)
	}
	// The agent's controller runs: with no traffic it lowers the bucket's
	// rate from the line rate toward its floor.
	bucketRate := func() units.Rate {
		b, ok, err := pacer.ReadBucket(netnsutil.Path(name, "h0"), "eth0")
		if err != nil || !ok {
			t.Fatalf("h0's bucket: found %v, %v", ok, err)
		}
		return b.Rate
	}
	deadline := time.Now().Add(5 * time.Second)
	for r := bucketRate(); r > 10*units.Mbit; r = bucketRate() {
		if time.Now().After(deadline) {
			t.Fatalf("h0's bucket rate is %v 5 s after up: the agent's controller is not running", r)
		}
		time.Sleep(20 * time.Millisecond)
	}

	code, out = runFabric(ctx, "up", file)
	if code != exitFailure || !strings.Contains(out, "already exists") {
		t.Errorf("second up: exit %d, want %d with the agent's error\n%q", code, exitFailure, out)
	}
	if !h.Alive() {
		t.Fatal("the failed second up ended the first lab's agent")
	}

	if code, out := runFabric(ctx, "down", name); code != exitOK {
		t.Fatalf("down: exit %d\n%s", code, out)
	}
	if h.Alive() {
		t.Errorf("agent %d still runs after down", h.PID)
	}
	if _, err := os.Stat(emu.LabDir(name)); err == nil {
		t.Errorf("%s left after down", emu.LabDir(name))
	}
}

// `fabric up` of a lab with link delay leaves an agent that runs the delay
// lines: pings take the delay; once the agent is killed (SIGKILL, no
// clean-up), nothing crosses the delayed links (they never pass undelayed)
// and `fabric status` says so; `fabric down` still removes everything.
func TestDelayAgentDeathStopsDelayedLinks(t *testing.T) {
	testenv.RequireRoot(t)
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	name := "t11dead" + hex.EncodeToString(b)
	file := filepath.Join(t.TempDir(), "delayed.yaml")
	src := fmt.Sprintf("name: %s\ntopology: {kind: star, hosts: 2}\nlinks: {rate: 100Mbit, delay: 1ms}\n", name)
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	t.Cleanup(func() { emu.Down(context.Background(), name) })
	if code, out := runFabric(ctx, "up", file); code != exitOK {
		t.Fatalf("up: exit %d\n%s", code, out)
	}
	h, err := emu.ReadAgent(name)
	if err != nil || h == nil || !h.DelayLines || !h.Detached {
		t.Fatalf("agent %+v (%v): want a detached agent running the delay lines", h, err)
	}
	lab, err := emu.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	rtts, err := lab.RTT(ctx, "h0", "h1", 5)
	if err != nil || slices.Min(rtts) < 3900*time.Microsecond {
		t.Fatalf("RTT %v (%v) with the agent up: want at least 4 ms", rtts, err)
	}
	if err := syscall.Kill(h.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); h.Alive(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("agent still alive after SIGKILL")
		}
	}
	if rtts, err := lab.RTT(ctx, "h0", "h1", 3); err == nil {
		t.Fatalf("pings crossed the delayed links with the agent dead: %v", rtts)
	}
	code, out := runFabric(ctx, "status", name)
	if code != exitOK || !strings.Contains(out, "delay lines: process") || !strings.Contains(out, "GONE: delayed links carry no traffic") {
		t.Errorf("status: exit %d, want the dead delay lines named\n%s", code, out)
	}
	if code, out := runFabric(ctx, "down", name); code != exitOK {
		t.Fatalf("down: exit %d\n%s", code, out)
	}
	if left, _ := netnsutil.LabPaths(name); len(left) > 0 {
		t.Errorf("namespaces left: %v", left)
	}
}

// Bad link delay and loss are bad input: exit 2, file:line: field, and
// nothing is made.
func TestUpBadWire(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ links, want string }{
		{"links: {delay: -1ms}", ":3: links.delay: "},
		{"links: {loss: 1}", ":3: links.loss: "},
		{"links: {delay: 5}", `"5" has no unit`},
		{"links: {host: {loss: {up: 1.5}}}", ":3: links.host.loss.up: "},
	} {
		file := filepath.Join(dir, "bad.yaml")
		if err := os.WriteFile(file, []byte("name: t11bad\ntopology: {kind: star, hosts: 2}\n"+c.links+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		code, out := runFabric(context.Background(), "up", file)
		if code != exitBadInput || !strings.Contains(out, c.want) {
			t.Errorf("%s: exit %d, output %q; want exit 2 and %q", c.links, code, out, c.want)
		}
	}
}
