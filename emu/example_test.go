package emu_test

import (
	"context"
	"fmt"
	"time"

	"github.com/fabric-emu/fabric/emu"
)

// A lab in ten lines, as a Mininet script would build it (it needs root,
// so the example is compiled by go test but not run).
func Example() {
	ctx := context.Background()
	spec := emu.NewCustom("mini").AddSwitch("s1").AddHost("h1").AddHost("h2").
		AddLink("h1", "s1").AddLink("h2", "s1", emu.LinkRate(10*emu.Mbit), emu.LinkDelay(time.Millisecond))
	lab, err := emu.Up(ctx, spec)
	if err != nil {
		fmt.Println(err) // nothing is left behind
		return
	}
	defer lab.Down(ctx)
	out, err := lab.Host("h1").Cmd(ctx, "ip", "-br", "addr")
	fmt.Println(out, err)
	rtts, err := lab.RTT(ctx, "h1", "h2", 3)
	fmt.Println(rtts, err)
}
