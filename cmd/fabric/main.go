// Command fabric builds emulated datacenter fabrics out of network
// namespaces and runs transport experiments on them. Each subcommand lives
// in its own file and is a thin layer over the emu, tc, hosts, experiments
// and results packages: flags, output formatting and exit codes only.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/fabric-emu/fabric/internal/yamlfile"
)

// Exit codes.
const (
	exitOK       = 0
	exitFailure  = 1 // the operation ran and failed (a ping lost, a lab did not build)
	exitBadInput = 2 // the user's input is wrong; nothing was created
)

// usageError marks an error as the user's input being wrong (exit 2).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// badInput wraps err so main exits with code 2.
func badInput(err error) error {
	if err == nil {
		return nil
	}
	return usageError{err}
}

// commands are the subcommands' constructors; each command file adds its
// own in init.
var commands []func() *cobra.Command

// addCommand registers a subcommand's constructor.
func addCommand(c func() *cobra.Command) { commands = append(commands, c) }

// newRootCmd builds the whole command tree. Each invocation gets its own, so
// no flag value outlives the command that set it.
func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "fabric",
		Short:         "Emulated datacenter fabrics for transport research",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRun: func(cmd *cobra.Command, _ []string) {
			level := slog.LevelInfo
			if v, _ := cmd.Flags().GetBool("verbose"); v {
				level = slog.LevelDebug
			}
			slog.SetDefault(slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: level})))
		},
	}
	root.PersistentFlags().BoolP("verbose", "v", false, "debug logging")
	for _, c := range commands {
		root.AddCommand(c())
	}
	return root
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCmd().ExecuteContext(ctx)
	stop()
	os.Exit(exitCode(err))
}

// exitCode prints err (one line) and maps it to the exit code: 2 for bad
// input, including every file:line error from a lab or experiment file.
func exitCode(err error) int {
	if err == nil {
		return exitOK
	}
	var ee exitError
	if !errors.As(err, &ee) || ee.msg != "" { // an exitError without a message was reported already
		fmt.Fprintln(os.Stderr, "fabric:", err)
	}
	var ue usageError
	var ye *yamlfile.Error
	if errors.As(err, &ue) || errors.As(err, &ye) {
		return exitBadInput
	}
	if errors.As(err, &ee) {
		return ee.code
	}
	return exitFailure
}

// exitError carries a specific exit code (for example pingall's 1 on loss).
type exitError struct {
	code int
	msg  string
}

func (e exitError) Error() string { return e.msg }
