package capture

import (
	"fmt"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Direction selects packets by their direction at the captured interface.
type Direction int

const (
	Both Direction = iota
	// In keeps packets the namespace receives on the interface: a switch
	// port's ingress side, the first timestamp of the LMM.
	In
	// Out keeps packets the namespace sends: for a switch port, the moment
	// the port's qdisc releases the packet, the LMM's second timestamp.
	Out
)

func (d Direction) String() string {
	switch d {
	case In:
		return "in"
	case Out:
		return "out"
	}
	return "both"
}

// ParseDirection parses "in", "out" or "both".
func ParseDirection(s string) (Direction, error) {
	switch s {
	case "", "both":
		return Both, nil
	case "in":
		return In, nil
	case "out":
		return Out, nil
	}
	return Both, fmt.Errorf("direction %q: want in, out or both", s)
}

// Filter is what a capture keeps. It compiles to a classic BPF program that
// runs in the kernel, so unwanted packets never reach the ring, and whose
// return value is the snap length, so the kernel copies only the headers.
type Filter struct {
	Direction Direction
	IPv4Only  bool   // drop ARP, IPv6 and the rest
	UDPOnly   bool   // only UDP (the probe stream); implies IPv4Only
	DstPort   uint16 // only UDP/TCP packets to this port (implies IPv4Only)
}

// Program compiles f into classic BPF returning snaplen for a kept packet
// and 0 for a dropped one.
func (f Filter) Program(snaplen uint32) ([]bpf.RawInstruction, error) {
	var prog []bpf.Instruction
	var rejects []int // conditional jumps whose false branch rejects
	// check appends a load and a jump that continues if the loaded value
	// equals val (or differs, if notEqual) and rejects otherwise.
	check := func(load bpf.Instruction, val uint32, notEqual bool) {
		prog = append(prog, load)
		cond := bpf.JumpEqual
		if notEqual {
			cond = bpf.JumpNotEqual
		}
		rejects = append(rejects, len(prog))
		prog = append(prog, bpf.JumpIf{Cond: cond, Val: val})
	}
	switch f.Direction {
	case In:
		check(bpf.LoadExtension{Num: bpf.ExtType}, unix.PACKET_OUTGOING, true)
	case Out:
		check(bpf.LoadExtension{Num: bpf.ExtType}, unix.PACKET_OUTGOING, false)
	}
	if f.IPv4Only || f.UDPOnly || f.DstPort != 0 {
		check(bpf.LoadAbsolute{Off: 12, Size: 2}, unix.ETH_P_IP, false)
	}
	if f.UDPOnly {
		check(bpf.LoadAbsolute{Off: 14 + 9, Size: 1}, unix.IPPROTO_UDP, false)
	}
	if f.DstPort != 0 {
		// X = IP header length; the port is at X + 14 + 2. The check does
		// not look at fragments: lab traffic is never fragmented.
		prog = append(prog, bpf.LoadMemShift{Off: 14})
		check(bpf.LoadIndirect{Off: 14 + 2, Size: 2}, uint32(f.DstPort), false)
	}
	accept := len(prog)
	prog = append(prog, bpf.RetConstant{Val: snaplen}, bpf.RetConstant{Val: 0})
	reject := accept + 1
	for _, i := range rejects {
		j := prog[i].(bpf.JumpIf)
		j.SkipFalse = uint8(reject - (i + 1))
		prog[i] = j
	}
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return nil, fmt.Errorf("capture filter: %w", err)
	}
	return raw, nil
}
