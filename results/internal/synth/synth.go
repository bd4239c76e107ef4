// Package synth writes synthetic pcap pairs (a switch's ingress and egress
// captures) with known latencies, for the LMM's tests and benchmark.
//
// Packets arrive at Poisson times and leave a FIFO served at a fixed rate,
// so the latencies have a realistic queueing shape; a fraction is dropped
// and never appears at egress. Every packet's true latency is returned (or
// summarised) so that tests compare the LMM with ground truth.
package synth

import (
	"bufio"
	"encoding/binary"
	"math/rand/v2"
	"os"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// Spec describes the synthetic traffic.
type Spec struct {
	Packets   int     // packets offered at ingress
	RateBPS   float64 // egress port rate, bit/s
	Load      float64 // offered load, fraction of RateBPS
	DropEvery int     // drop every k-th packet in the switch (0: none)
	Snaplen   int     // bytes captured per packet (default 128)
	FloorNS   int64   // fixed forwarding cost added to every packet
	Seed      uint64
}

// Truth is what the generator knows about the pair it wrote.
type Truth struct {
	Delivered int
	Dropped   int
	// LatencyNS holds every delivered packet's latency when Keep was
	// requested; the benchmark leaves it nil to stay bounded in memory.
	LatencyNS []int64
	SumNS     int64
}

// Write writes ingressPath and egressPath. keep asks for every latency.
func Write(ingressPath, egressPath string, s Spec, keep bool) (Truth, error) {
	if s.Snaplen == 0 {
		s.Snaplen = 128
	}
	in, err := newFile(ingressPath, s.Snaplen)
	if err != nil {
		return Truth{}, err
	}
	out, err := newFile(egressPath, s.Snaplen)
	if err != nil {
		in.close()
		return Truth{}, err
	}
	rng := rand.New(rand.NewPCG(s.Seed, 0x9e3779b97f4a7c15))
	var truth Truth
	// Packets are 1514-byte data and 66-byte ACK-sized frames, 4:1, so the
	// egress FIFO both queues and drains.
	meanBits := (4*1514 + 66) * 8.0 / 5
	meanGapNS := meanBits / (s.RateBPS * s.Load) * 1e9
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC).UnixNano()
	arrive := float64(t0)
	depart := int64(0) // when the FIFO is next free
	frame := make([]byte, 1514)
	var seq [16]uint32
	for i := 0; i < s.Packets; i++ {
		arrive += rng.ExpFloat64() * meanGapNS
		a := int64(arrive)
		flow := i % 16
		size := 1514
		if rng.IntN(5) == 0 {
			size = 66
		}
		udp := flow%4 == 0
		fillFrame(frame[:size], flow, uint16(i), seq[flow], udp, i)
		seq[flow] += uint32(size - 54)
		if err := in.write(a, frame[:size]); err != nil {
			return truth, err
		}
		if s.DropEvery > 0 && i%s.DropEvery == s.DropEvery-1 {
			truth.Dropped++
			continue
		}
		start := max(a+s.FloorNS, depart)
		depart = start + int64(float64(size*8)/s.RateBPS*1e9)
		// The egress tap stamps a packet when the qdisc releases it, i.e.
		// when its transmission starts.
		if err := out.write(start, frame[:size]); err != nil {
			return truth, err
		}
		truth.Delivered++
		truth.SumNS += start - a
		if keep {
			truth.LatencyNS = append(truth.LatencyNS, start-a)
		}
	}
	if err := in.close(); err != nil {
		out.close()
		return truth, err
	}
	return truth, out.close()
}

// fillFrame builds Ethernet/IPv4/TCP-or-UDP headers. The egress copy is the
// same bytes: the matcher must not depend on MAC, TTL or checksum anyway,
// and the tests that check that edit frames themselves.
func fillFrame(b []byte, flow int, ipID uint16, seq uint32, udp bool, n int) {
	clear(b[:64])
	copy(b[0:6], []byte{2, 0, 0, 0, 0, 1})
	copy(b[6:12], []byte{2, 0, 0, 0, 0, 2})
	binary.BigEndian.PutUint16(b[12:], 0x0800)
	ip := b[14:]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(len(b)-14))
	binary.BigEndian.PutUint16(ip[4:], ipID)
	binary.BigEndian.PutUint16(ip[6:], 0x4000) // DF
	ip[8] = 64
	copy(ip[12:16], []byte{10, 0, byte(flow), 2})
	copy(ip[16:20], []byte{10, 0, 99, 2})
	l4 := ip[20:]
	binary.BigEndian.PutUint16(l4[0:], uint16(40000+flow))
	binary.BigEndian.PutUint16(l4[2:], 5001)
	if udp {
		ip[9] = 17
		binary.BigEndian.PutUint16(l4[4:], uint16(len(b)-34))
		binary.BigEndian.PutUint64(l4[8:], uint64(n)) // payload: a sequence number
	} else {
		ip[9] = 6
		binary.BigEndian.PutUint32(l4[4:], seq)
		l4[12] = 0x50
	}
}

type file struct {
	f       *os.File
	bw      *bufio.Writer
	w       *pcapgo.Writer
	snaplen int
}

func newFile(path string, snaplen int) (*file, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	w := pcapgo.NewWriterNanos(bw)
	if err := w.WriteFileHeader(uint32(snaplen), layers.LinkTypeEthernet); err != nil {
		f.Close()
		return nil, err
	}
	return &file{f: f, bw: bw, w: w, snaplen: snaplen}, nil
}

func (f *file) write(ts int64, frame []byte) error {
	data := frame[:min(len(frame), f.snaplen)]
	return f.w.WritePacket(gopacket.CaptureInfo{
		Timestamp:     time.Unix(0, ts),
		CaptureLength: len(data),
		Length:        len(frame),
	}, data)
}

func (f *file) close() error {
	if err := f.bw.Flush(); err != nil {
		f.f.Close()
		return err
	}
	return f.f.Close()
}
