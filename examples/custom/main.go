// A Mininet-style script: two switches, three hosts, one slow link, then
// ping everything and tear it down. Run as root:
//
//	go run ./examples/custom
package main

import (
	"context"
	"fmt"
	"log"
	"time"

	"fabric/emu"
	"fabric/internal/units"
)

func main() {
	ctx := context.Background()
	spec := emu.NewCustom("mini").
		AddSwitch("s1").AddSwitch("s2").
		AddHost("h1").AddHost("h2").AddHost("h3").
		AddLink("h1", "s1").AddLink("h2", "s1").AddLink("h3", "s2").
		AddLinkRate("s1", "s2", 10*units.Mbit)
	lab, err := emu.Up(ctx, spec)
	if err != nil {
		log.Fatal(err)
	}
	defer lab.Down(ctx)
	res, err := lab.PingAll(ctx, time.Second)
	if err != nil {
		log.Fatal(err)
	}
	for _, h := range lab.Graph.Hosts() {
		fmt.Printf("%s %s\n", h.Name, h.Addr)
	}
	fmt.Printf("pingall: %d/%d received\n", res.Received, res.Sent)
}
