// Package builtin lists fabric's own transports, each run as `fabric
// transport NAME` on every host under the same contract a user's transport
// speaks (package transport).
package builtin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"sort"

	"github.com/fabric-emu/fabric/hosts/transport"
	"github.com/fabric-emu/fabric/hosts/transport/homa"
	"github.com/fabric-emu/fabric/hosts/transport/ndp"
	"github.com/fabric-emu/fabric/hosts/transport/tcp"
	"github.com/fabric-emu/fabric/hosts/transport/udp"
)

// Run is a transport's process: see transport.Env for what it is told.
type Run func(ctx context.Context, env *transport.Env, stdout io.Writer, log *slog.Logger) error

var transports = map[string]Run{
	"tcp":  tcp.Run,  // kernel TCP with the scheme's congestion control
	"homa": homa.Run, // receiver-driven, 8 priorities (Montazeri's thesis)
	"ndp":  ndp.Run,  // receiver-pulled over trimming switches (Handley et al., SIGCOMM 2017)
	"udp":  udp.Run,  // one open-loop datagram per message: the poisson pattern's packets
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

// Process is run as the whole of a transport's process (`fabric run`
// starts one per host): on one processor (GOMAXPROCS=1, unless the
// environment sets GOMAXPROCS), and profiled when EnvCPUProfile is set.
//
// One processor because a lab runs a transport process on every host,
// many more runnable processes than the machine has cores, each doing a
// few µs of work per wake-up, and a second processor mostly adds a thread
// that wakes, looks for work in Go's scheduler and sleeps again
// (BenchmarkHomaCPUPerPacket measures the difference).
func Process(run Run) Run {
	if os.Getenv("GOMAXPROCS") == "" {
		run = onOneProcessor(run)
	}
	return profiled(run)
}

func onOneProcessor(run Run) Run {
	return func(ctx context.Context, env *transport.Env, stdout io.Writer, log *slog.Logger) error {
		runtime.GOMAXPROCS(1)
		return run(ctx, env, stdout, log)
	}
}

// EnvCPUProfile, set to a directory in the environment of `fabric run`
// (which its transports inherit), makes every built-in transport write a
// CPU profile of its whole run there as HOST.cpu.pprof, for `go tool
// pprof`: where a transport's CPU per packet goes decides how much load
// this machine can carry faithfully.
const EnvCPUProfile = "FABRIC_TRANSPORT_CPUPROFILE"

// profiled is run, profiled when EnvCPUProfile is set.
func profiled(run Run) Run {
	dir := os.Getenv(EnvCPUProfile)
	if dir == "" {
		return run
	}
	return func(ctx context.Context, env *transport.Env, stdout io.Writer, log *slog.Logger) error {
		f, err := os.Create(filepath.Join(dir, env.Host+".cpu.pprof"))
		if err != nil {
			return fmt.Errorf("%s: %w", EnvCPUProfile, err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return fmt.Errorf("%s: %w", EnvCPUProfile, err)
		}
		err = run(ctx, env, stdout, log)
		pprof.StopCPUProfile()
		return errors.Join(err, f.Close())
	}
}
