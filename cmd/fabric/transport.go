package main

import (
	"fmt"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fabric-emu/fabric/hosts/transport"
	"github.com/fabric-emu/fabric/hosts/transport/builtin"
)

func init() { addCommand(transportCmd) }

// transportCmd runs one of fabric's transports on this host under the
// transport contract: the runner starts it in every host's namespace with
// the FABRIC_* environment, exactly as it starts a user's transport.
func transportCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "transport NAME",
		Short:  "Run a built-in transport (" + strings.Join(builtin.Names(), ", ") + ") under the transport contract",
		Hidden: true,
		Long: `Run one of fabric's transports in this host's namespace, as fabric run does
on every host: it reads the FABRIC_* environment (docs/transport-contract.md),
prints "ready", sends its schedule, writes records, and exits 0 on SIGTERM.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			run, ok := builtin.Lookup(args[0])
			if !ok {
				return badInput(fmt.Errorf("no transport %q (have %s)", args[0], strings.Join(builtin.Names(), ", ")))
			}
			env, err := transport.FromEnviron()
			if err != nil {
				return badInput(err)
			}
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil)).With("transport", args[0], "host", env.Host)
			return builtin.Process(run)(cmd.Context(), env, cmd.OutOrStdout(), log)
		},
	}
}
