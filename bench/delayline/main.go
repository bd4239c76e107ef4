// Command delayline measures a delay line from outside fabric, so that any
// two builds compare on the same footing: it brings up a 2-host star with
// 1 ms of delay on both links (`fabric up`), sends 64-byte UDP datagrams
// from h0 to h1 at fixed rates (through `fabric exec`), and reports the
// agent's CPU per packet (its whole process: delay loop and the verdicts
// that carry each packet on through the kernel), the one-way delay beyond
// the 2 ms configured (p50, p99; the p50 includes the host stacks' own
// time), what arrived, and the machine's steal meanwhile.
//
//	go run ./bench/delayline -fabric bin/fabric -kpps 10,20,50
package main

import (
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

const (
	lab      = "bdline"
	port     = 9301
	size     = 64 - 28 // UDP payload of a 64-byte IP packet
	oneWay   = 2 * time.Millisecond
	duration = 3 * time.Second
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "send" {
		send(os.Args[2:])
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "recv" {
		recv(os.Args[2:])
		return
	}
	bin := flag.String("fabric", "bin/fabric", "fabric binary")
	rates := flag.String("kpps", "10,20,50", "offered rates, thousands of packets per second")
	flag.Parse()
	if os.Getuid() != 0 {
		fmt.Println("delay line: needs root, skipped")
		return
	}
	dir, err := os.MkdirTemp("", "fabric-bench-delayline")
	check(err)
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, lab+".yaml")
	check(os.WriteFile(file, []byte("name: "+lab+"\ntopology: {kind: star, hosts: 2}\nlinks: {rate: 1Gbit, delay: 1ms}\n"), 0o644))
	fabric(*bin, "up", file)
	cleanup = func() { _ = exec.Command(*bin, "down", lab).Run() }
	defer cleanup()
	agent := agentPID()
	self, err := os.Executable()
	check(err)
	fmt.Printf("%6s %8s %9s %14s %12s %12s %7s\n", "kpps", "sent", "received", "agent µs/pkt", "late p50", "late p99", "steal")
	for _, r := range strings.Split(*rates, ",") {
		kpps, err := strconv.ParseFloat(r, 64)
		check(err)
		measure(*bin, self, agent, kpps, dir)
	}
}

// measure runs one rate: a receiver in h1, a sender in h0, and the agent's
// CPU and the machine's steal read around the sender's run.
func measure(bin, self string, agent int, kpps float64, dir string) {
	out := filepath.Join(dir, fmt.Sprintf("recv-%g.bin", kpps))
	rx := exec.Command(bin, "exec", lab, "h1", "--", self, "recv", out)
	check(rx.Start())
	time.Sleep(300 * time.Millisecond)
	cpu0 := ticks(agent)
	steal0, total0 := machine()
	tx, err := exec.Command(bin, "exec", lab, "h0", "--", self, "send", hostAddr(bin, "h1"), strconv.FormatFloat(kpps, 'f', -1, 64)).Output()
	check(err)
	cpu1 := ticks(agent)
	steal1, total1 := machine()
	time.Sleep(200 * time.Millisecond)
	check(rx.Process.Signal(os.Interrupt))
	_ = rx.Wait()
	late := readLateness(out)
	sent, err := strconv.Atoi(strings.TrimSpace(string(tx)))
	check(err)
	perPkt := float64(cpu1-cpu0) * 1e4 / float64(max(len(late), 1)) // a tick is 10 ms = 1e4 µs
	fmt.Printf("%6g %8d %9d %14.1f %12v %12v %6.1f%%\n", kpps, sent, len(late), perPkt,
		quantile(late, 0.5), quantile(late, 0.99), 100*(steal1-steal0)/max(total1-total0, 1))
}

// send paces datagrams carrying their CLOCK_MONOTONIC send time, all those
// due by now in each turn, turns ~100 µs apart, and prints how many it sent
// (a failed write is not sent, and not tried again); a sender that falls
// behind stops at the duration's count or time, whichever comes first.
func send(args []string) {
	kpps, err := strconv.ParseFloat(args[1], 64)
	check(err)
	conn, err := net.Dial("udp", net.JoinHostPort(args[0], strconv.Itoa(port)))
	check(err)
	buf := make([]byte, size)
	gap := time.Duration(float64(time.Second) / (kpps * 1e3))
	start, next, sent := time.Now(), 0, 0
	total := int(duration / gap)
	for time.Since(start) < duration && next < total {
		for ; next < total && !start.Add(time.Duration(next)*gap).After(time.Now()); next++ {
			binary.LittleEndian.PutUint64(buf, uint64(mono()))
			if _, err := conn.Write(buf); err == nil {
				sent++
			}
		}
		time.Sleep(100 * time.Microsecond)
	}
	fmt.Println(sent)
}

// recv writes each datagram's one-way delay, in ns, until interrupted.
func recv(args []string) {
	conn, err := net.ListenUDP("udp", &net.UDPAddr{Port: port})
	check(err)
	f, err := os.Create(args[0])
	check(err)
	done := make(chan os.Signal, 1)
	signal.Notify(done, os.Interrupt)
	go func() { <-done; conn.Close() }()
	buf := make([]byte, 2048)
	rec := make([]byte, 8)
	for {
		n, err := conn.Read(buf)
		if err != nil {
			break
		}
		if n >= 8 {
			binary.LittleEndian.PutUint64(rec, uint64(mono()-int64(binary.LittleEndian.Uint64(buf))))
			_, _ = f.Write(rec)
		}
	}
	check(f.Close())
}

func readLateness(file string) []time.Duration {
	b, err := os.ReadFile(file)
	check(err)
	var late []time.Duration
	for i := 0; i+8 <= len(b); i += 8 {
		late = append(late, time.Duration(binary.LittleEndian.Uint64(b[i:]))-oneWay)
	}
	sort.Slice(late, func(i, j int) bool { return late[i] < late[j] })
	return late
}

func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[int(q*float64(len(sorted)-1))].Round(time.Microsecond)
}

func mono() int64 {
	var ts unix.Timespec
	check(unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts))
	return ts.Nano()
}

// agentPID reads the lab's agent from its state file (holder.json in the
// labs of older builds).
func agentPID() int {
	for _, name := range []string{"agent.json", "holder.json"} {
		b, err := os.ReadFile(filepath.Join("/run/fabric", lab, name))
		if err != nil {
			continue
		}
		var s struct{ PID int }
		check(json.Unmarshal(b, &s))
		return s.PID
	}
	check(fmt.Errorf("lab %s has no agent state file", lab))
	return 0
}

func hostAddr(bin, node string) string {
	out, err := exec.Command(bin, "status", lab, "--json").Output()
	check(err)
	var s struct {
		Nodes []struct{ Name, Addr string }
	}
	check(json.Unmarshal(out, &s))
	for _, n := range s.Nodes {
		if n.Name == node {
			return n.Addr
		}
	}
	check(fmt.Errorf("lab %s has no node %s", lab, node))
	return ""
}

// ticks is a process's user + system CPU in clock ticks, its children's included.
func ticks(pid int) int64 {
	u, sy, _ := stat(pid)
	t := u + sy
	// The delay lines may run in a child of the agent (tc/delay): its
	// time is the agent's too.
	entries, err := os.ReadDir("/proc")
	check(err)
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil || child == pid {
			continue
		}
		if u, sy, ppid := stat(child); ppid == pid {
			t += u + sy
		}
	}
	return t
}

// stat reads a process's user and system ticks and its parent (zeros if
// it has gone).
func stat(pid int) (utime, stime int64, ppid int) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ppid, _ = strconv.Atoi(f[1])
	utime, _ = strconv.ParseInt(f[11], 10, 64)
	stime, _ = strconv.ParseInt(f[12], 10, 64)
	return utime, stime, ppid
}

// machine is /proc/stat's steal and total ticks over all CPUs.
func machine() (steal, total float64) {
	b, err := os.ReadFile("/proc/stat")
	check(err)
	f := strings.Fields(strings.SplitN(string(b), "\n", 2)[0])[1:]
	for i, v := range f[:8] {
		x, _ := strconv.ParseFloat(v, 64)
		total += x
		if i == 7 {
			steal = x
		}
	}
	return steal, total
}

func fabric(bin string, args ...string) {
	if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "fabric %s: %v\n%s", strings.Join(args, " "), err, out)
		cleanup()
		os.Exit(1)
	}
}

// cleanup removes the lab once it is up, on every way out.
var cleanup = func() {}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "delay line:", err)
		cleanup()
		os.Exit(1)
	}
}
