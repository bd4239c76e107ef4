package transport

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/fabric-emu/fabric/internal/units"

	"github.com/fabric-emu/fabric/internal/yamlfile"
)

// DSCP is a 6-bit Differentiated Services code point. Sockets carry it in
// the upper six bits of the IP TOS byte; the two ECN bits stay zero so the
// kernel alone sets ECT/CE.
type DSCP uint8

// dscpNames are the RFC 4594 / RFC 2474 names accepted in files and flags.
var dscpNames = map[string]DSCP{
	"CS0": 0, "CS1": 8, "CS2": 16, "CS3": 24, "CS4": 32, "CS5": 40, "CS6": 48, "CS7": 56,
	"AF11": 10, "AF12": 12, "AF13": 14, "AF21": 18, "AF22": 20, "AF23": 22,
	"AF31": 26, "AF32": 28, "AF33": 30, "AF41": 34, "AF42": 36, "AF43": 38,
	"EF": 46, "VA": 44, "LE": 1, "BE": 0, "DF": 0,
}

// ParseDSCP accepts a name (CS7, AF41, EF) or a number 0..63.
func ParseDSCP(s string) (DSCP, error) {
	t := strings.ToUpper(strings.TrimSpace(s))
	if v, ok := dscpNames[t]; ok {
		return v, nil
	}
	n, err := strconv.ParseUint(t, 0, 8)
	if err != nil || n > 63 {
		return 0, fmt.Errorf("DSCP %q: want a name (CS0..CS7, AF11..AF43, EF) or a number 0..63", s)
	}
	return DSCP(n), nil
}

// String prints the class-selector or well-known name when there is one.
func (d DSCP) String() string {
	if d%8 == 0 {
		return fmt.Sprintf("CS%d", d/8)
	}
	for name, v := range dscpNames {
		if v == d && name != "BE" && name != "DF" {
			return name
		}
	}
	return strconv.Itoa(int(d))
}

// TOS is the IP TOS byte that carries d with the ECN bits clear.
func (d DSCP) TOS() int { return int(d) << 2 }

// UnmarshalYAML accepts "CS7" or 56.
func (d *DSCP) UnmarshalYAML(n *yaml.Node) error {
	v, err := ParseDSCP(n.Value)
	if err != nil {
		return yamlfile.LineError(n, "%v", err)
	}
	*d = v
	return nil
}

// SizeClass gives flows smaller than Below the code point Value, as in
// `dscp: {below: 10KB, value: CS7}` (HULL Table 5's TCP-QoS puts small
// flows in a high-priority band).
type SizeClass struct {
	Below units.Size `yaml:"below" json:"below"`
	Value DSCP       `yaml:"value" json:"value"`
}

// DSCPPolicy picks a flow's code point from its size: the first class
// (by increasing Below) whose bound the size is under, else Default.
// Long-lived flows and probes, which have no size, get Default.
type DSCPPolicy struct {
	Default DSCP
	Classes []SizeClass
}

// For returns the code point of a flow of size bytes.
func (p DSCPPolicy) For(size int64) DSCP {
	for _, c := range p.sorted() {
		if size < int64(c.Below) {
			return c.Value
		}
	}
	return p.Default
}

func (p DSCPPolicy) sorted() []SizeClass {
	cs := append([]SizeClass(nil), p.Classes...)
	sort.Slice(cs, func(i, j int) bool { return cs[i].Below < cs[j].Below })
	return cs
}

// ParseSizeClass parses the flag form "10KB=CS7".
func ParseSizeClass(s string) (SizeClass, error) {
	size, val, ok := strings.Cut(s, "=")
	if !ok {
		return SizeClass{}, fmt.Errorf("%q: want SIZE=DSCP, e.g. 10KB=CS7", s)
	}
	b, err := units.ParseSize(size)
	if err != nil {
		return SizeClass{}, err
	}
	d, err := ParseDSCP(val)
	if err != nil {
		return SizeClass{}, err
	}
	return SizeClass{Below: b, Value: d}, nil
}
