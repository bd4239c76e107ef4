package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fabric-emu/fabric/experiments"
	"github.com/fabric-emu/fabric/hosts/transport"
	"github.com/fabric-emu/fabric/hosts/transport/builtin"
	"github.com/fabric-emu/fabric/internal/units"
)

func init() { addCommand(transportCmd) }

// transportCmd runs one of fabric's transports on this host under the
// transport contract: the runner starts it in every host's namespace with
// the FABRIC_* environment, exactly as it starts a user's transport.
// `transport check` judges a user's transport against the contract.
func transportCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "transport NAME",
		Short: "Run a built-in transport (" + strings.Join(builtin.Names(), ", ") + "), or check yours against the transport contract",
		Long: `Run one of fabric's transports in this host's namespace, as fabric run does
on every host: it reads the FABRIC_* environment (docs/transport-contract.md),
prints "ready", sends its schedule, writes records, and exits 0 on SIGTERM.

fabric transport check CMD... runs your transport on a throwaway lab instead
and says which rules of the contract it meets.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			run, ok := builtin.Lookup(args[0])
			if !ok {
				return badInput(fmt.Errorf("no transport %q (have %s; to judge a program of yours: fabric transport check CMD...)", args[0], strings.Join(builtin.Names(), ", ")))
			}
			env, err := transport.FromEnviron()
			if err != nil {
				return badInput(err)
			}
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil)).With("transport", args[0], "host", env.Host)
			return builtin.Process(run)(cmd.Context(), env, cmd.OutOrStdout(), log)
		},
	}
	c.AddCommand(transportCheckCmd())
	return c
}

// transportCheckCmd is `fabric transport check CMD...`.
func transportCheckCmd() *cobra.Command {
	var o experiments.CheckOptions
	var rate, args string
	c := &cobra.Command{
		Use:   "check CMD [ARG...]",
		Short: "Run a transport on a throwaway lab and say which rules of the transport contract it meets",
		Long: `Run CMD as every host's transport on a throwaway star against a small schedule
(every host sends to every other, from empty messages to 500 KB), and judge
it by the rules of docs/transport-contract.md: its ready line, staying up
until SIGTERM, exiting 0 within the grace after it, the schema of every
record, and one whole flow record per message, by its receiver, from its
scheduled time. CMD is found as an experiment's command is, relative to
the working directory, and runs there; placeholders such as {schedule}
work. Exits 1 when a rule is broken, and keeps the logs and records.`,
		Example: `  fabric transport check python3 examples/transport-python/transport.py
  fabric transport check --delay 1ms --loss 0.01 --rate 100Mbit ./bin/transport`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, argv []string) error {
			var err error
			if o.Rate, err = units.ParseRate(rate); err != nil {
				return badInput(fmt.Errorf("--rate: %w", err))
			}
			if args != "" {
				if err := json.Unmarshal([]byte(args), &o.Args); err != nil {
					return badInput(fmt.Errorf("--args: want a JSON object: %w", err))
				}
			}
			if o.Loss < 0 || o.Loss >= 1 || o.Hosts < 2 {
				return badInput(fmt.Errorf("--loss wants a probability in [0, 1) and --hosts at least 2"))
			}
			res, err := experiments.CheckTransport(cmd.Context(), argv, o)
			if err != nil {
				return err
			}
			printCheck(cmd.OutOrStdout(), res)
			if !res.Met() {
				return exitError{code: exitFailure}
			}
			return nil
		},
	}
	c.Flags().SetInterspersed(false) // flags after CMD are its own
	f := c.Flags()
	f.IntVar(&o.Hosts, "hosts", 3, "hosts of the star")
	f.StringVar(&rate, "rate", "10Mbit", "every link's rate")
	f.DurationVar(&o.Delay, "delay", 0, "one-way delay of every host's link (switch to host)")
	f.Float64Var(&o.Loss, "loss", 0, "loss probability of every link, each way (0.01 is 1 %)")
	f.DurationVar(&o.Duration, "duration", 2*time.Second, "the schedule's length")
	f.Float64Var(&o.Load, "load", 0.3, "each host's offered load, a fraction of its link")
	f.DurationVar(&o.ReadyTimeout, "ready-timeout", 0, "the ready allowance, as a scheme's ready_timeout (default: the runner's)")
	f.StringVar(&args, "args", "", "FABRIC_ARGS, a JSON object")
	f.StringVar(&o.Dir, "dir", "", "keep the trial's files here (default: a temporary directory, kept only when a rule is broken)")
	return c
}

// printCheck writes a check's verdict, a rule a line.
func printCheck(w io.Writer, res *experiments.CheckResult) {
	fmt.Fprintf(w, "fabric transport check: %s\non a %s, %d messages\n\n", strings.Join(res.Command, " "), res.Lab, res.Messages)
	broken := 0
	for _, r := range res.Rules {
		status := string(r.Status)
		if r.Status == experiments.RuleBroken {
			status, broken = "BROKEN", broken+1
		}
		fmt.Fprintf(w, "  %-12s %s", status, r.Name)
		switch {
		case r.Status == experiments.RuleMet && len(r.Detail) > 0:
			fmt.Fprintf(w, ": %s\n", r.Detail[0])
		default:
			fmt.Fprintln(w)
			for i, d := range r.Detail {
				if i == 5 {
					fmt.Fprintf(w, "               … and %d more\n", len(r.Detail)-5)
					break
				}
				fmt.Fprintf(w, "               %s\n", d)
			}
		}
	}
	if broken == 0 {
		fmt.Fprintln(w, "\nThe transport meets every rule checked.")
		return
	}
	fmt.Fprintf(w, "\nThe transport breaks %d of %d rules; its logs and records: %s\n", broken, len(res.Rules), filepath.Join(res.Dir, "trial"))
}
