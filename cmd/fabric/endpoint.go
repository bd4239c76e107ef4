package main

import (
	"log/slog"
	"os"
	"slices"

	"github.com/spf13/cobra"

	"fabric/hosts/endpoint"
)

// endpointCmd runs the traffic engine inside a host's namespace. It is
// hidden because the host runtimes and the experiment runner start it;
// people use `fabric run`. The flags belong to package endpoint (ParseArgs,
// Config.Args), so the runner's command lines and this parser agree.
var endpointCmd = &cobra.Command{
	Use:    "endpoint PATTERN [flags]",
	Short:  "Run a traffic endpoint (server, dynamic, incast, permutation, static, probe) in this namespace",
	Hidden: true,
	Long: `Run one traffic endpoint in the current network namespace.

Start "fabric endpoint server" on every host that receives traffic, then the
clients; every completed flow is appended to RUN_DIR/records-<host>.<pattern>.jsonl.
Clients exit after --duration; servers run until SIGTERM. Both flush their
records and exit 0 when stopped with SIGTERM.

Examples:
  fabric endpoint server  --host h2 --run-dir runs/1
  fabric endpoint dynamic --host h1 --run-dir runs/1 --peer 10.0.2.2 --peer 10.0.3.2 \
      --workload hull_1k_10m --load 0.4 --link-rate 100Mbit --duration 20s --seed 1
  fabric endpoint incast  --host h1 --run-dir runs/1 --peer 10.0.2.2,10.0.3.2 --size 64KB --rounds 100
  fabric endpoint permutation --host h1 --run-dir runs/1 --peer 10.0.5.2 --duration 10s --cc dctcp
  fabric endpoint probe   --host h1 --run-dir runs/1 --peer 10.0.2.2 --duration 10s --dscp CS7

Flags:
` + endpoint.Usage(),
	// endpoint.ParseArgs owns the flags.
	DisableFlagParsing: true,
	RunE: func(cmd *cobra.Command, args []string) error {
		if slices.Contains(args, "-h") || slices.Contains(args, "--help") {
			return cmd.Help()
		}
		cfg, err := endpoint.ParseArgs(args)
		if err != nil {
			return badInput(err)
		}
		level := slog.LevelInfo
		if endpoint.Verbose(args) {
			level = slog.LevelDebug
		}
		cfg.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})).With("host", cfg.Host, "pattern", cfg.Pattern)
		return endpoint.Run(cmd.Context(), cfg)
	},
}

func init() { addCommand(endpointCmd) }
