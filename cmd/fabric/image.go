package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/fabric-emu/fabric/hosts" // also registers the docker host runtime
)

func init() {
	addCommand(imageCmd)
	addCommand(sleepCmd)
}

func imageCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "image",
		Short: "Container images for `hosts: {runtime: docker}`",
	}
	c.AddCommand(imageBuildCmd())
	return c
}

func imageBuildCmd() *cobra.Command {
	var tag, binary string
	var quiet bool
	c := &cobra.Command{
		Use:   "build",
		Short: "Build the endpoint image (FROM scratch + this fabric binary) through the Docker API",
		Long: `Build the endpoint image that docker-runtime hosts run.

The build context is images/host/Dockerfile (built into fabric) and a
static fabric binary: by default the running one, so the image runs the same
code as the lab that starts it. Nothing is pulled. The binary must be static:
build it with CGO_ENABLED=0 (make image does).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if binary == "" {
				var err error
				if binary, err = hosts.FabricBinary(); err != nil {
					return err
				}
			} else if _, err := os.Stat(binary); err != nil {
				return badInput(fmt.Errorf("--binary: %w", err))
			}
			var progress io.Writer
			if !quiet {
				progress = cmd.ErrOrStderr()
			}
			t0 := time.Now()
			d := &hosts.Docker{}
			id, err := d.BuildImage(cmd.Context(), hosts.ImageBuild{Tag: tag, Binary: binary, Progress: progress})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "built %s (%.12s) from %s in %s\n", tag, trimDigest(id), binary, time.Since(t0).Round(time.Millisecond))
			return nil
		},
	}
	c.Flags().StringVarP(&tag, "tag", "t", hosts.DefaultImage, "image tag (lab files name it in hosts.image)")
	c.Flags().StringVar(&binary, "binary", "", "static fabric binary to put in the image (default: $"+hosts.EnvFabricBinary+" or this executable)")
	c.Flags().BoolVarP(&quiet, "quiet", "q", false, "do not print the daemon's build output")
	return c
}

func trimDigest(id string) string {
	const p = "sha256:"
	if len(id) > len(p) && id[:len(p)] == p {
		return id[len(p):]
	}
	return id
}

// sleepCmd is the endpoint image's command: the container only has to keep
// the host's network namespace alive until `fabric down` stops it. A
// static image has no sleep(1), and as PID 1 a process without a SIGTERM
// handler would ignore the signal; this one exits 0 on it.
func sleepCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "sleep",
		Short:  "Wait until SIGTERM or SIGINT, then exit 0 (the endpoint image's command)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// main's signal context is live by now; saying so lets the
			// docker runtime (and tests) know a SIGTERM will be handled.
			fmt.Fprintln(cmd.OutOrStdout(), hosts.SleepReady)
			<-cmd.Context().Done()
			return nil
		},
	}
}
