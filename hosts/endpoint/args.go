package endpoint

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"fabric/hosts/workload"
	"fabric/internal/units"
	"fabric/internal/yamlfile"
)

// The command line of `fabric endpoint PATTERN [flags]` is defined here,
// next to Config, so that the runner's Args and the command's ParseArgs
// cannot drift apart (a round-trip test checks them).

// Args returns the command-line arguments (after "fabric endpoint") that
// make a process run cfg. The workload is passed by its file path.
func (c Config) Args() []string {
	a := []string{string(c.Pattern), "--host", c.Host, "--run-dir", c.RunDir}
	add := func(flag, v string) { a = append(a, "--"+flag, v) }
	for _, p := range c.Peers {
		add("peer", p.String())
	}
	if c.Port != 0 {
		add("port", strconv.Itoa(c.Port))
	}
	if c.Seed != 0 {
		add("seed", strconv.FormatUint(c.Seed, 10))
	}
	durs := []struct {
		flag string
		d    time.Duration
	}{{"duration", c.Duration}, {"drain", c.Drain}, {"gap", c.Gap}, {"sample-interval", c.SampleInterval}, {"probe-interval", c.ProbeInterval}}
	for _, d := range durs {
		if d.d != 0 {
			add(d.flag, d.d.String())
		}
	}
	if c.CC != "" {
		add("cc", c.CC)
	}
	if c.ECN != ECNLeave {
		add("ecn", string(c.ECN))
	}
	if c.DSCP.Default != 0 {
		add("dscp", strconv.Itoa(int(c.DSCP.Default)))
	}
	for _, sc := range c.DSCP.Classes {
		add("dscp-below", fmt.Sprintf("%d=%d", uint64(sc.Below), sc.Value))
	}
	if c.Workload != nil {
		add("workload", c.Workload.File)
	}
	if c.Load != 0 {
		add("load", strconv.FormatFloat(c.Load, 'g', -1, 64))
	}
	if c.LinkRate != 0 {
		add("link-rate", strconv.FormatUint(uint64(c.LinkRate), 10))
	}
	ints := []struct {
		flag string
		v    int
	}{{"conns", c.ConnsPerServer}, {"rounds", c.Rounds}, {"flows", c.Flows}, {"probe-size", c.ProbeSize}}
	for _, i := range ints {
		if i.v != 0 {
			add(i.flag, strconv.Itoa(i.v))
		}
	}
	if c.Size != 0 {
		add("size", strconv.FormatUint(uint64(c.Size), 10))
	}
	return a
}

// flagNames maps Config's field paths (as Validate reports them) to flags.
var flagNames = map[string]string{"peers": "peer", "run_dir": "run-dir", "link_rate": "link-rate",
	"sample_interval": "sample-interval", "probe_size": "probe-size", "probe_interval": "probe-interval", "pattern": "PATTERN"}

// ParseArgs parses "PATTERN [flags]" into a validated Config. Every error
// is the user's (bad input); those in a workload file carry file:line.
func ParseArgs(args []string) (Config, error) {
	fs, v := newFlagSet()
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	if fs.NArg() != 1 {
		return Config{}, fmt.Errorf("want one pattern (%v), got %q", Patterns, fs.Args())
	}
	cfg := Config{Pattern: Pattern(fs.Arg(0)), Host: v.host, RunDir: v.runDir, Port: v.port, Seed: v.seed,
		Duration: v.duration, Drain: v.drain, CC: v.cc, ECN: ECN(v.ecn), Load: v.load, ConnsPerServer: v.conns,
		Rounds: v.rounds, Gap: v.gap, Flows: v.flows, SampleInterval: v.sample, ProbeInterval: v.probeInterval, ProbeSize: v.probeSize}
	var err error
	for _, p := range v.peers {
		for _, one := range strings.Split(p, ",") {
			peer, perr := ParsePeer(one)
			if perr != nil {
				return Config{}, fmt.Errorf("--peer: %w", perr)
			}
			cfg.Peers = append(cfg.Peers, peer)
		}
	}
	if cfg.DSCP.Default, err = ParseDSCP(v.dscp); err != nil {
		return Config{}, fmt.Errorf("--dscp: %w", err)
	}
	for _, s := range v.dscpBelow {
		sc, err := ParseSizeClass(s)
		if err != nil {
			return Config{}, fmt.Errorf("--dscp-below: %w", err)
		}
		cfg.DSCP.Classes = append(cfg.DSCP.Classes, sc)
	}
	if v.linkRate != "" {
		if cfg.LinkRate, err = units.ParseRate(v.linkRate); err != nil {
			return Config{}, fmt.Errorf("--link-rate: %w", err)
		}
	}
	if v.size != "" {
		if cfg.Size, err = units.ParseSize(v.size); err != nil {
			return Config{}, fmt.Errorf("--size: %w", err)
		}
	}
	if v.workload != "" {
		var dirs []string
		if len(v.workloadDirs) > 0 {
			dirs = workload.SearchPath(v.workloadDirs...)
		}
		if cfg.Workload, err = workload.Open(v.workload, dirs); err != nil {
			return Config{}, err
		}
	}
	if err := cfg.Validate(); err != nil {
		var fe *yamlfile.FieldError
		if errors.As(err, &fe) {
			name, ok := flagNames[fe.Path]
			if !ok {
				name = fe.Path
			}
			if name != "PATTERN" {
				name = "--" + name
			}
			return Config{}, fmt.Errorf("%s: %w", name, fe.Err)
		}
		return Config{}, err
	}
	return cfg, nil
}

type flagValues struct {
	host, runDir, cc, ecn, dscp, workload, linkRate, size string
	peers, dscpBelow, workloadDirs                        []string
	port, conns, rounds, flows, probeSize                 int
	seed                                                  uint64
	load                                                  float64
	duration, drain, gap, sample, probeInterval           time.Duration
	verbose                                               bool
}

func newFlagSet() (*pflag.FlagSet, *flagValues) {
	v := &flagValues{}
	fs := pflag.NewFlagSet("endpoint", pflag.ContinueOnError)
	fs.SortFlags = false
	fs.StringVar(&v.host, "host", "", "this host's name (records and records-<host>.<pattern>.jsonl)")
	fs.StringVar(&v.runDir, "run-dir", "", "directory the records file is written to")
	fs.StringArrayVar(&v.peers, "peer", nil, "server to send to, IP or NAME=IP (repeat, or comma-separate)")
	fs.IntVar(&v.port, "port", DefaultPort, "server port (TCP and UDP)")
	fs.Uint64Var(&v.seed, "seed", 0, "random seed for sizes, arrivals and peer choice")
	fs.DurationVar(&v.duration, "duration", 0, "how long a client generates traffic")
	fs.DurationVar(&v.drain, "drain", 10*time.Second, "dynamic: how long to wait for responses in flight after --duration")
	fs.StringVar(&v.cc, "cc", "", "TCP congestion control of sending sockets (cubic, reno, bbr, dctcp); default: the kernel's")
	fs.StringVar(&v.ecn, "ecn", "", "set net.ipv4.tcp_ecn in this namespace: on or off (default: leave the lab's setting)")
	fs.StringVar(&v.dscp, "dscp", "CS0", "DSCP of flows no --dscp-below class matches, of long-lived flows and of probes")
	fs.StringArrayVar(&v.dscpBelow, "dscp-below", nil, "SIZE=DSCP: flows smaller than SIZE get DSCP, e.g. 10KB=CS7 (repeatable)")
	fs.StringVar(&v.workload, "workload", "", "dynamic: flow-size CDF, a name (hull_1k_10m) or a .cdf file")
	fs.StringArrayVar(&v.workloadDirs, "workload-dir", nil, "dynamic: extra directory to look workloads up in (also $"+workload.EnvDirs+")")
	fs.Float64Var(&v.load, "load", 0, "dynamic: mean receive throughput as a fraction of --link-rate, in (0,1)")
	fs.StringVar(&v.linkRate, "link-rate", "", "dynamic: this host's link rate, e.g. 100Mbit")
	fs.IntVar(&v.conns, "conns", 16, "dynamic: persistent connections per server and DSCP class")
	fs.StringVar(&v.size, "size", "", "incast: bytes each worker sends per query, e.g. 64KB")
	fs.IntVar(&v.rounds, "rounds", 0, "incast: number of queries (0: until --duration)")
	fs.DurationVar(&v.gap, "gap", 0, "incast: pause between queries")
	fs.IntVar(&v.flows, "flows", 1, "static, permutation: long-lived flows per peer")
	fs.DurationVar(&v.sample, "sample-interval", 100*time.Millisecond, "server: throughput sampling interval of long-lived flows")
	fs.DurationVar(&v.probeInterval, "probe-interval", time.Millisecond, "probe: interval between packets")
	fs.IntVar(&v.probeSize, "probe-size", 1500, "probe: IP packet size in bytes")
	fs.BoolVarP(&v.verbose, "verbose", "v", false, "debug logging")
	return fs, v
}

// Usage is the flag help of `fabric endpoint`.
func Usage() string {
	fs, _ := newFlagSet()
	return fs.FlagUsages()
}

// Verbose reports whether args ask for debug logging.
func Verbose(args []string) bool {
	for _, a := range args {
		if a == "-v" || a == "--verbose" || a == "--verbose=true" {
			return true
		}
	}
	return false
}
