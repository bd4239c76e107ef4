// Package endpoint is the traffic engine that runs on every emulated host:
// one process per host and role, started inside the host's network
// namespace as `fabric endpoint <pattern> [flags]` (or in-process through
// Run by a program already inside the namespace).
//
// Roles and patterns:
//
//   - server: answers request/response connections (dynamic, incast),
//     receives long-lived flows (static, permutation) and records them with
//     a throughput sample every 100 ms, and records every probe packet.
//   - dynamic: open-loop Poisson requests to the peers (HULL §6.2).
//   - incast: an aggregator asks every peer at once for Size bytes, Rounds times.
//   - static, permutation: long-lived flows to the peers for Duration.
//   - probe: a 1500-byte UDP packet every 1 ms to each peer (HULL §5.2).
//
// The transport is kernel TCP (UDP for probes); congestion control, ECN and
// DSCP are set per socket. Every completed flow becomes one record (package
// fabric/internal/records) in RunDir/records-<host>.<pattern>.jsonl: one
// file per process, so a host's server and client never share a file.
//
// An experiment runner starts a server on every host that receives
// traffic, waits for its "server listening" log line, starts the clients
// (Config.Args gives their command lines), waits for the clients to exit,
// and stops the servers with SIGTERM; every role flushes its records and
// exits 0. Clients retry a server that is not listening yet for 10 s.
//
// What each role records (types of fabric/internal/records):
//
//   - dynamic client: a Flow per response (Src = server, Dst = client,
//     StartNS = request written, EndNS = last byte read).
//   - incast aggregator: a Flow per response and a Query per round.
//   - server: a Flow per long-lived flow when it ends (Size = Bytes =
//     what arrived), a Sample of its cumulative bytes every 100 ms, and a
//     Probe per probe packet (kernel receive timestamp, DSCP as received).
//
// Host names in records are each endpoint's --host; servers tell clients
// theirs during the connection handshake, so peers may be given as bare IPs.
//
// Busy connections (dynamic): a request goes to a random connection of a
// random server even if earlier responses on it are still arriving. It is
// pipelined on the TCP stream and answered after them, as HULL's open-loop
// generator does, so its completion time includes that wait.
//
// ECN: net.ipv4.tcp_ecn is per network namespace. By default the engine
// leaves it to the lab's per-host sysctls; --ecn on|off makes the engine
// write it in its own namespace. ECN is negotiated by the connecting side,
// so set it on clients (servers keep the kernel default 2, which accepts).
// The engine's TOS byte carries only the DSCP; the kernel sets ECT.
//
// Timing: open-loop schedules (dynamic arrivals, probes) sleep with
// nanosleep on a dedicated thread with real-time priority when permitted,
// and late requests are sent at once so the rate stays exact. The dynamic
// client logs how late it was ("dynamic schedule" late_mean, late_max,
// late_over_1ms_pct); a run on a starved CPU shows there.
//
// Records are buffered and flushed once a second and at exit; the traffic
// path makes no syscalls besides socket I/O and the pacing sleep.
package endpoint

import (
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"time"

	"fabric/hosts/workload"
	"fabric/internal/units"
	"fabric/internal/yamlfile"
)

// Pattern is the role a process plays.
type Pattern string

const (
	Server      Pattern = "server"
	Dynamic     Pattern = "dynamic"
	Incast      Pattern = "incast"
	Permutation Pattern = "permutation"
	Static      Pattern = "static"
	Probe       Pattern = "probe"
)

// Patterns lists every role, server first.
var Patterns = []Pattern{Server, Dynamic, Incast, Permutation, Static, Probe}

// DefaultPort is where servers listen (TCP and UDP).
const DefaultPort = 5301

// Peer is a host traffic goes to. Records name hosts by the name each
// server reports about itself, so Name is only a fallback for logs.
type Peer struct {
	Name string
	Addr netip.Addr
}

func (p Peer) String() string {
	if p.Name == "" || p.Name == p.Addr.String() {
		return p.Addr.String()
	}
	return p.Name + "=" + p.Addr.String()
}

// ParsePeer accepts "10.0.0.2" or "h2=10.0.0.2".
func ParsePeer(s string) (Peer, error) {
	name, addr, ok := strings.Cut(s, "=")
	if !ok {
		name, addr = "", s
	}
	a, err := netip.ParseAddr(strings.TrimSpace(addr))
	if err != nil {
		return Peer{}, fmt.Errorf("peer %q: want IP or NAME=IP", s)
	}
	if name == "" {
		name = a.String()
	}
	return Peer{Name: name, Addr: a}, nil
}

// Config is one endpoint process. Zero values take the defaults listed.
type Config struct {
	Pattern  Pattern
	Host     string        // this host's name, used in records and the records file name
	RunDir   string        // where the records file is written
	Peers    []Peer        // servers to send to (clients only)
	Port     int           // server port, default 5301
	Seed     uint64        // seeds sizes, arrivals and peer choice; same seed, same draws
	Duration time.Duration // how long clients generate traffic
	// Drain is how long a request/response client waits after Duration
	// for responses still in flight (default 10s). Requests unanswered
	// by then are logged, not recorded.
	Drain time.Duration

	CC   string     // TCP_CONGESTION for every socket that sends; "" = kernel default
	ECN  ECN        // set net.ipv4.tcp_ecn in this namespace; "" = leave it
	DSCP DSCPPolicy // code point by flow size

	// dynamic
	Workload       *workload.CDF
	Load           float64    // fraction of LinkRate the mean receive throughput should be, in (0, 1)
	LinkRate       units.Rate // the client's link rate
	ConnsPerServer int        // persistent connections per server and DSCP class, default 16 (HULL §6.2)

	// incast
	Size   units.Size    // bytes each worker answers
	Rounds int           // queries; 0 = as many as fit in Duration
	Gap    time.Duration // pause between queries

	// static, permutation
	Flows int // long-lived flows per peer, default 1

	// server
	SampleInterval time.Duration // throughput sampling of long-lived flows, default 100ms

	// probe
	ProbeInterval time.Duration // default 1ms (HULL §5.2)
	ProbeSize     int           // IP packet size, default 1500 (HULL §5.2)

	Log *slog.Logger // default slog.Default()
}

func (c *Config) setDefaults() {
	if c.Port == 0 {
		c.Port = DefaultPort
	}
	if c.Drain == 0 {
		c.Drain = 10 * time.Second
	}
	if c.ConnsPerServer == 0 {
		c.ConnsPerServer = 16
	}
	if c.Flows == 0 {
		c.Flows = 1
	}
	if c.SampleInterval == 0 {
		c.SampleInterval = 100 * time.Millisecond
	}
	if c.ProbeInterval == 0 {
		c.ProbeInterval = time.Millisecond
	}
	if c.ProbeSize == 0 {
		c.ProbeSize = 1500
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
}

// probeHeader is IPv4 (20) + UDP (8): ProbeSize counts the whole IP packet.
const probeHeader = 28

// Validate reports the first problem as a *yamlfile.FieldError whose path
// is the snake_case field name, so an experiment loader can place it at a
// file:line with Doc.Wrap.
func (c *Config) Validate() error {
	c.setDefaults()
	f := yamlfile.Field
	known := false
	for _, p := range Patterns {
		known = known || p == c.Pattern
	}
	switch {
	case !known:
		return f("pattern", "unknown pattern %q (want one of %v)", c.Pattern, Patterns)
	case c.Host == "" || strings.ContainsAny(c.Host, "/ \t\n"):
		return f("host", "want this host's name (no spaces or slashes), got %q", c.Host)
	case c.RunDir == "":
		return f("run_dir", "want the run directory the records go to")
	case c.Port <= 0 || c.Port > 65535:
		return f("port", "want 1..65535, got %d", c.Port)
	case c.Duration < 0 || c.Drain < 0 || c.Gap < 0:
		return f("duration", "durations must not be negative")
	}
	if c.Pattern == Server {
		if c.SampleInterval < 10*time.Millisecond {
			return f("sample_interval", "want at least 10ms, got %v", c.SampleInterval)
		}
		return nil
	}
	if len(c.Peers) == 0 {
		return f("peers", "pattern %s needs at least one peer", c.Pattern)
	}
	if c.Duration == 0 && !(c.Pattern == Incast && c.Rounds > 0) {
		return f("duration", "pattern %s needs a duration", c.Pattern)
	}
	switch c.Pattern {
	case Dynamic:
		switch {
		case c.Workload == nil:
			return f("workload", "the dynamic pattern needs a workload (a name such as hull_1k_10m or a .cdf file)")
		case !(c.Load > 0 && c.Load < 1):
			return f("load", "want a fraction of the link rate in (0, 1), got %v", c.Load)
		case c.LinkRate == 0:
			return f("link_rate", "the dynamic pattern needs the client's link rate (e.g. 100Mbit) to turn load into a request rate")
		case c.ConnsPerServer < 1:
			return f("conns", "want at least 1 connection per server, got %d", c.ConnsPerServer)
		}
	case Incast:
		switch {
		case c.Size == 0:
			return f("size", "the incast pattern needs the bytes each worker sends (e.g. 64KB)")
		case c.Rounds < 0:
			return f("rounds", "want a number of queries >= 0, got %d", c.Rounds)
		}
	case Static, Permutation:
		if c.Flows < 1 {
			return f("flows", "want at least 1 flow per peer, got %d", c.Flows)
		}
	case Probe:
		if c.ProbeSize < probeHeader+probePayloadMin || c.ProbeSize > 65507+probeHeader {
			return f("probe_size", "want an IP packet size of %d..65535 bytes, got %d", probeHeader+probePayloadMin, c.ProbeSize)
		}
		if c.ProbeInterval < 10*time.Microsecond {
			return f("probe_interval", "want at least 10µs, got %v", c.ProbeInterval)
		}
	}
	return nil
}
