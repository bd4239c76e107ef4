// A Mininet-style script: two switches, three hosts, one slow link with a
// millisecond of delay, then ping everything and tear it down. Run as root:
//
//	go run ./examples/custom
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/fabric-emu/fabric/emu"
)

func main() {
	if err := run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// run returns its errors instead of exiting, so the deferred Down always
// removes the lab.
func run(ctx context.Context) error {
	spec := emu.NewCustom("mini").
		AddSwitch("s1").AddSwitch("s2").
		AddHost("h1").AddHost("h2").AddHost("h3").
		AddLink("h1", "s1").AddLink("h2", "s1").AddLink("h3", "s2").
		AddLink("s1", "s2", emu.LinkRate(10*emu.Mbit), emu.LinkDelay(time.Millisecond))
	lab, err := emu.Up(ctx, spec)
	if err != nil {
		return err // Up removed whatever it had made
	}
	defer lab.Down(ctx)
	out, err := lab.Host("h1").Cmd(ctx, "ip", "-br", "addr") // any program of this machine, in h1's namespace
	fmt.Print(out)
	if err != nil {
		return err
	}
	rtts, err := lab.RTT(ctx, "h1", "h3", 3) // ICMP echo across the slow link
	if err != nil {
		return err
	}
	fmt.Printf("h1 -> h3 RTT %v\n", rtts)
	res, err := lab.PingAll(ctx, time.Second)
	if err != nil {
		return err
	}
	fmt.Printf("pingall: %d/%d received\n", res.Received, res.Sent)
	if lost := res.Lost(); len(lost) > 0 {
		return fmt.Errorf("lost: %v", lost)
	}
	return nil
}
