// Command fabricdemo is a project of its own that uses fabric as a library,
// as a transport researcher's would: it builds a lab in Go, runs an
// experiment on it through experiments.Run, and prints where the report is.
// Run it as root from this directory:
//
//	go run .
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"

	"github.com/fabric-emu/fabric/emu"
	"github.com/fabric-emu/fabric/experiments"
)

// experiment is everything but the lab: two schemes on one schedule.
const experiment = `
name: demo
schemes:
  cubic: {cc: cubic}
  dctcp: {cc: dctcp, ports: {marking: {ecn: {threshold: 3KB}}}}
traffic: {pattern: dynamic, workload: homa_w4_google_all, load: 0.3, client: h0, servers: rest}
duration: 5s
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	lab := emu.NewCustom("demo").AddSwitch("s0").
		AddHost("h0").AddHost("h1").AddHost("h2").
		AddLink("h0", "s0", emu.LinkRate(100*emu.Mbit)).
		AddLink("h1", "s0", emu.LinkRate(100*emu.Mbit)).
		AddLink("h2", "s0", emu.LinkRate(100*emu.Mbit))
	spec, err := experiments.ParseOn("demo.yaml", []byte(experiment), lab)
	if err != nil {
		return err
	}
	res, err := experiments.Run(ctx, spec, experiments.Options{Out: "runs", Progress: os.Stderr})
	if err != nil {
		return err
	}
	fmt.Println(res.Dir + "/report.md")
	return nil
}
