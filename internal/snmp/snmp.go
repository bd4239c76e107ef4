// Package snmp reads the kernel's per-namespace protocol counters
// (/proc/net/snmp), such as UDP's RcvbufErrors: datagrams that arrived
// whole and were dropped because the receiving socket's buffer was full,
// a loss no transport sees on the wire and the lab's ports do not count;
// and the machine's input backlogs' drops (/proc/net/softnet_stat).
package snmp

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// UDP is one of the UDP counters of the network namespace of the calling
// thread (thread-self: a goroutine locked into a host's namespace reads
// that host's, not the process's first thread's).
func UDP(field string) (int, error) { return counter("Udp:", field) }

// TCP is one of the TCP counters of the calling thread's namespace, as
// UDP reads UDP's: InSegs and OutSegs are the segments a host's TCP took
// in and sent, RetransSegs those it sent again.
func TCP(field string) (int, error) { return counter("Tcp:", field) }

func counter(proto, field string) (int, error) {
	b, err := os.ReadFile("/proc/thread-self/net/snmp")
	if err != nil {
		return 0, err
	}
	return Field(string(b), proto, field)
}

// TCPExt is one of Linux's extended TCP counters (/proc/net/netstat's
// TcpExt: line) of the calling thread's network namespace, such as
// TCPTimeouts.
func TCPExt(field string) (int, error) {
	b, err := os.ReadFile("/proc/thread-self/net/netstat")
	if err != nil {
		return 0, err
	}
	return Field(string(b), "TcpExt:", field)
}

// Field reads one counter of /proc/net/snmp's (or netstat's) text, whose
// protocols each have a line of names followed by a line of values.
func Field(snmp, proto, field string) (int, error) {
	lines := strings.Split(snmp, "\n")
	for i := 0; i+1 < len(lines); i++ {
		if !strings.HasPrefix(lines[i], proto) || !strings.HasPrefix(lines[i+1], proto) {
			continue
		}
		names, values := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		for j, name := range names {
			if name == field && j < len(values) {
				return strconv.Atoi(values[j])
			}
		}
	}
	return 0, fmt.Errorf("no %s %s in /proc/net/snmp", proto, field)
}

// BacklogDrops sums the packets every CPU's input backlog has dropped
// since boot: the second column of /proc/net/softnet_stat, in hex. The
// file is the machine's, not a namespace's, so another workload's drops
// count too; on a machine running a lab they are the lab's.
func BacklogDrops() (uint64, error) {
	b, err := os.ReadFile("/proc/net/softnet_stat")
	if err != nil {
		return 0, err
	}
	var sum uint64
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		v, err := strconv.ParseUint(f[1], 16, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/net/softnet_stat: %w", err)
		}
		sum += v
	}
	return sum, nil
}
