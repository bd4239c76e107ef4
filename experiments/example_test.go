package experiments_test

import (
	"context"
	"fmt"
	"os"
	"os/signal"

	"github.com/fabric-emu/fabric/experiments"
)

// Run a built-in scenario from Go, as `fabric run hull/table1 --quick`
// does: Ctrl-C stops it cleanly, and the result carries the report and
// the paper comparison.
func ExampleRun() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	spec, err := experiments.Builtin("hull/table1")
	if err != nil {
		panic(err)
	}
	res, err := experiments.Run(ctx, spec.WithQuick(), experiments.Options{Out: "runs", Seed: 1, Progress: os.Stderr})
	if err != nil {
		panic(err)
	}
	for _, r := range res.Report.Rows {
		fmt.Printf("%s: mean switch latency %.0f µs\n", r.Scheme, r.LatAvg)
	}
	if res.Paper != nil {
		pass, total := res.Paper.Passed()
		fmt.Printf("ordering agrees with HULL Table 1 in %d of %d rows\n", pass, total)
	}
}

// An experiment written in the file format, parsed with file:line errors.
func ExampleParse() {
	_, err := experiments.Parse("mine.yaml", []byte(`name: mine
lab: {name: m, topology: {kind: star, hosts: 3}, links: {rate: 100Mbit}}
schemes: {tcp: {cc: cubic}}
traffic: {pattern: static, client: h1, servers: h0}
sweep: {load: [0.5]}
duration: 10s
`), "")
	fmt.Println(err)
	// Output: mine.yaml:5: sweep.load: the static pattern has no field "load" to sweep (it applies to dynamic, poisson)
}
