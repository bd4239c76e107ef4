package tcp

import (
	"fmt"

	"github.com/fabric-emu/fabric/hosts/transport"
)

// Args are the scheme's settings for this transport.
type Args struct {
	CC    string                `json:"cc,omitempty"`
	ECN   ECN                   `json:"ecn,omitempty"`
	Conns int                   `json:"conns,omitempty"`
	DSCP  []transport.SizeClass `json:"dscp,omitempty"`
	Port  int                   `json:"port,omitempty"`
}

// Defaults.
const (
	DefaultConns = 16 // per destination and DSCP (HULL §6.2: 16 connections to each server)
	DefaultPort  = 5301
)

func parseArgs(env *transport.Env) (Args, error) {
	var a Args
	if err := env.DecodeArgs(&a); err != nil {
		return a, err
	}
	if a.Conns == 0 {
		a.Conns = DefaultConns
	}
	if a.Port == 0 {
		a.Port = DefaultPort
	}
	switch {
	case a.Conns < 1:
		return a, fmt.Errorf("args.conns: want at least 1, got %d", a.Conns)
	case a.ECN != ECNLeave && a.ECN != ECNOn && a.ECN != ECNOff:
		return a, fmt.Errorf("args.ecn: want on or off, got %q", a.ECN)
	}
	return a, nil
}

// dscpFor is the code point of message m: the schedule's, or else the
// scheme's size policy.
func (a Args) dscpFor(m transport.Message) transport.DSCP {
	if m.DSCP != 0 || m.Stream {
		return transport.DSCP(m.DSCP)
	}
	return transport.DSCPPolicy{Classes: a.DSCP}.For(m.Size)
}
