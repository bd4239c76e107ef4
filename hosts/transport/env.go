package transport

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Env is what a transport process is told about its trial. It travels as
// FABRIC_* environment variables (Environ, FromEnviron) and, for commands
// that prefer flags, as {placeholders} in the command line (Expand).
type Env struct {
	Contract int        // FABRIC_CONTRACT: Version
	Host     string     // FABRIC_HOST: this host's name
	Addr     netip.Addr // FABRIC_ADDR: this host's address
	Peers    []Peer     // FABRIC_PEERS: every host of the lab, "h0=10.0.0.2,h1=…"
	Schedule string     // FABRIC_SCHEDULE: this host's schedule (JSON lines of Message)
	Records  string     // FABRIC_RECORDS: the file to write records to
	RunDir   string     // FABRIC_RUN_DIR: a directory for the transport's own files
	StartNS  int64      // FABRIC_START_NS: CLOCK_REALTIME ns of schedule time 0
	// FABRIC_DURATION_NS: how long the schedule runs; SIGTERM comes after
	// it, once the trial's drain time has passed.
	Duration time.Duration
	LinkRate int64         // FABRIC_LINK_RATE_BPS: this host's link rate, bit/s
	MTU      int           // FABRIC_MTU: this host's link MTU, bytes
	RTT      time.Duration // FABRIC_RTT_NS: the lab's measured unloaded RTT between its farthest hosts
	Seed     uint64        // FABRIC_SEED: the trial's seed, for a transport's own random choices
	Workload string        // FABRIC_WORKLOAD: the traffic's size distribution (a built-in name), if one
	// FABRIC_ARGS: the scheme's free-form args, as a JSON object.
	Args json.RawMessage
}

// Peer is a host of the lab.
type Peer struct {
	Name string
	Addr netip.Addr
}

// The variables, in the order Environ writes them.
const (
	EnvContract = "FABRIC_CONTRACT"
	EnvHost     = "FABRIC_HOST"
	EnvAddr     = "FABRIC_ADDR"
	EnvPeers    = "FABRIC_PEERS"
	EnvSchedule = "FABRIC_SCHEDULE"
	EnvRecords  = "FABRIC_RECORDS"
	EnvRunDir   = "FABRIC_RUN_DIR"
	EnvStart    = "FABRIC_START_NS"
	EnvDuration = "FABRIC_DURATION_NS"
	EnvLinkRate = "FABRIC_LINK_RATE_BPS"
	EnvMTU      = "FABRIC_MTU"
	EnvRTT      = "FABRIC_RTT_NS"
	EnvSeed     = "FABRIC_SEED"
	EnvWorkload = "FABRIC_WORKLOAD"
	EnvArgs     = "FABRIC_ARGS"
)

// vars pairs each variable with its value in e.
func (e *Env) vars() [][2]string {
	peers := make([]string, len(e.Peers))
	for i, p := range e.Peers {
		peers[i] = p.Name + "=" + p.Addr.String()
	}
	args := string(e.Args)
	if args == "" {
		args = "{}"
	}
	return [][2]string{
		{EnvContract, strconv.Itoa(e.Contract)},
		{EnvHost, e.Host},
		{EnvAddr, e.Addr.String()},
		{EnvPeers, strings.Join(peers, ",")},
		{EnvSchedule, e.Schedule},
		{EnvRecords, e.Records},
		{EnvRunDir, e.RunDir},
		{EnvStart, strconv.FormatInt(e.StartNS, 10)},
		{EnvDuration, strconv.FormatInt(e.Duration.Nanoseconds(), 10)},
		{EnvLinkRate, strconv.FormatInt(e.LinkRate, 10)},
		{EnvMTU, strconv.Itoa(e.MTU)},
		{EnvRTT, strconv.FormatInt(e.RTT.Nanoseconds(), 10)},
		{EnvSeed, strconv.FormatUint(e.Seed, 10)},
		{EnvWorkload, e.Workload},
		{EnvArgs, args},
	}
}

// Environ is e as NAME=value strings for a process's environment.
func (e *Env) Environ() []string {
	var out []string
	for _, kv := range e.vars() {
		out = append(out, kv[0]+"="+kv[1])
	}
	return out
}

// Expand replaces {placeholders} in a command-line argument: {host},
// {addr}, {peers}, {schedule}, {records}, {run_dir}, {start_ns},
// {duration_ns}, {link_rate_bps}, {mtu}, {rtt_ns}, {seed}, {workload},
// {args}: the lower-case names of the variables without FABRIC_.
func (e *Env) Expand(arg string) string {
	if !strings.Contains(arg, "{") {
		return arg
	}
	var pairs []string
	for _, kv := range e.vars() {
		pairs = append(pairs, "{"+strings.ToLower(strings.TrimPrefix(kv[0], "FABRIC_"))+"}", kv[1])
	}
	return strings.NewReplacer(pairs...).Replace(arg)
}

// Placeholders lists the names Expand knows, for error messages.
func Placeholders() []string {
	var out []string
	for _, kv := range (&Env{}).vars() {
		out = append(out, "{"+strings.ToLower(strings.TrimPrefix(kv[0], "FABRIC_"))+"}")
	}
	sort.Strings(out)
	return out
}

// FromEnviron reads the Env of this process (os.Getenv).
func FromEnviron() (*Env, error) { return ParseEnv(os.Getenv) }

// ParseEnv reads an Env through get; a missing or malformed variable is an
// error that names it.
func ParseEnv(get func(string) string) (*Env, error) {
	p := envParser{get: get}
	e := &Env{
		Contract: int(p.int(EnvContract)),
		Host:     p.need(EnvHost),
		Addr:     p.addr(EnvAddr),
		Peers:    p.peers(EnvPeers),
		Schedule: p.need(EnvSchedule),
		Records:  p.need(EnvRecords),
		RunDir:   get(EnvRunDir),
		StartNS:  p.int(EnvStart),
		Duration: time.Duration(p.int(EnvDuration)),
		LinkRate: p.int(EnvLinkRate),
		MTU:      int(p.int(EnvMTU)),
		RTT:      time.Duration(p.int(EnvRTT)),
		Workload: get(EnvWorkload),
	}
	if v := get(EnvSeed); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		p.check(EnvSeed, err)
		e.Seed = s
	}
	if v := get(EnvArgs); v != "" {
		if !json.Valid([]byte(v)) {
			p.check(EnvArgs, fmt.Errorf("not JSON: %q", v))
		}
		e.Args = json.RawMessage(v)
	}
	if err := errors.Join(p.errs...); err != nil {
		return nil, fmt.Errorf("transport environment: %w", err)
	}
	return e, nil
}

// envParser reads variables and collects what is wrong with them.
type envParser struct {
	get  func(string) string
	errs []error
}

func (p *envParser) check(name string, err error) {
	if err != nil {
		p.errs = append(p.errs, fmt.Errorf("%s: %w", name, err))
	}
}

func (p *envParser) need(name string) string {
	v := p.get(name)
	if v == "" {
		p.errs = append(p.errs, fmt.Errorf("%s is not set", name))
	}
	return v
}

func (p *envParser) int(name string) int64 {
	v := p.need(name)
	if v == "" {
		return 0
	}
	n, err := strconv.ParseInt(v, 10, 64)
	p.check(name, err)
	return n
}

func (p *envParser) addr(name string) netip.Addr {
	v := p.need(name)
	if v == "" {
		return netip.Addr{}
	}
	a, err := netip.ParseAddr(v)
	p.check(name, err)
	return a
}

func (p *envParser) peers(name string) []Peer {
	var out []Peer
	for _, kv := range strings.Split(p.get(name), ",") {
		if kv == "" {
			continue
		}
		n, addr, _ := strings.Cut(kv, "=")
		a, err := netip.ParseAddr(addr)
		if err != nil {
			p.check(name, fmt.Errorf("%q: %w", kv, err))
			continue
		}
		out = append(out, Peer{Name: n, Addr: a})
	}
	return out
}

// Start is the schedule's time 0.
func (e *Env) Start() time.Time { return time.Unix(0, e.StartNS) }

// DecodeArgs unmarshals the scheme's args into v; unknown fields are an
// error, so a misspelt argument is not silently ignored.
func (e *Env) DecodeArgs(v any) error {
	if len(e.Args) == 0 {
		return nil
	}
	dec := json.NewDecoder(strings.NewReader(string(e.Args)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%s: %w", EnvArgs, err)
	}
	return nil
}

// PeerAddr is the address of the host named name.
func (e *Env) PeerAddr(name string) (netip.Addr, bool) {
	for _, p := range e.Peers {
		if p.Name == name {
			return p.Addr, true
		}
	}
	return netip.Addr{}, false
}

// PeerName is the name of the host at addr.
func (e *Env) PeerName(addr netip.Addr) (string, bool) {
	for _, p := range e.Peers {
		if p.Addr == addr {
			return p.Name, true
		}
	}
	return "", false
}

// Duration is a time in a scheme's args, written with its unit ("5ms").
type Duration time.Duration

// UnmarshalJSON accepts "5ms", "200us" and the like.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want a duration with its unit, such as \"5ms\", got %s", b)
	}
	v, err := time.ParseDuration(s)
	if err != nil || v < 0 {
		return fmt.Errorf("want a duration with its unit, such as \"5ms\", got %q", s)
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON writes the duration as UnmarshalJSON reads it.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }
