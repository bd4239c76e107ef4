package capture

import (
	"encoding/binary"
	"fmt"
	"net/netip"

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
	// Src and Dst, when not empty, keep only IPv4 packets from (to) one
	// of these addresses (implies IPv4Only): the LMM's captures keep the
	// packets that can cross from its ingress ports to its egress port,
	// not the rest of the switch's traffic.
	Src, Dst []netip.Addr
}

// MaxAddrs bounds Src and Dst: a classic BPF jump skips at most 255
// instructions, one per address.
const MaxAddrs = 255

// checkAddrs refuses address lists the program cannot hold.
func (f Filter) checkAddrs() error {
	for _, addrs := range [][]netip.Addr{f.Src, f.Dst} {
		if len(addrs) > MaxAddrs {
			return fmt.Errorf("capture filter: %d addresses, at most %d", len(addrs), MaxAddrs)
		}
		for _, a := range addrs {
			if !a.Is4() {
				return fmt.Errorf("capture filter: %s is not an IPv4 address", a)
			}
		}
	}
	return nil
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
	// oneOf appends a load of the IPv4 address at off and compares that
	// continue past the list on a match and reject after the last miss.
	oneOf := func(off uint32, addrs []netip.Addr) {
		prog = append(prog, bpf.LoadAbsolute{Off: off, Size: 4})
		for k, a := range addrs {
			v := binary.BigEndian.Uint32(a.AsSlice())
			if k == len(addrs)-1 {
				rejects = append(rejects, len(prog))
				prog = append(prog, bpf.JumpIf{Cond: bpf.JumpEqual, Val: v})
				break
			}
			prog = append(prog, bpf.JumpIf{Cond: bpf.JumpEqual, Val: v, SkipTrue: uint8(len(addrs) - 1 - k)})
		}
	}
	if err := f.checkAddrs(); err != nil {
		return nil, err
	}
	if f.IPv4Only || f.UDPOnly || f.DstPort != 0 || len(f.Src) > 0 || len(f.Dst) > 0 {
		check(bpf.LoadAbsolute{Off: 12, Size: 2}, unix.ETH_P_IP, false)
	}
	if len(f.Src) > 0 {
		oneOf(14+12, f.Src)
	}
	if len(f.Dst) > 0 {
		oneOf(14+16, f.Dst)
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
