// Package builtin lists fabric's own transports, each run as `fabric
// transport NAME` on every host under the same contract a user's transport
// speaks (package transport).
package builtin

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sort"

	"github.com/fabric-emu/fabric/hosts/transport"
	"github.com/fabric-emu/fabric/hosts/transport/homa"
	"github.com/fabric-emu/fabric/hosts/transport/ndp"
	"github.com/fabric-emu/fabric/hosts/transport/tcp"
)

// Run is a transport's process: see transport.Env for what it is told.
type Run func(ctx context.Context, env *transport.Env, stdout io.Writer, log *slog.Logger) error

var transports = map[string]Run{
	"tcp":  tcp.Run,  // kernel TCP with the scheme's congestion control
	"homa": homa.Run, // receiver-driven, 8 priorities (Montazeri's thesis)
	"ndp":  ndp.Run,  // receiver-pulled over trimming switches (Handley et al., SIGCOMM 2017)
}

// Lookup returns the transport called name.
func Lookup(name string) (Run, bool) {
	r, ok := transports[name]
	return r, ok
}

// Names lists the built-in transports, sorted.
func Names() []string {
	out := make([]string, 0, len(transports))
	for n := range transports {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Has reports whether name is a built-in transport.
func Has(name string) bool { return slices.Contains(Names(), name) }
