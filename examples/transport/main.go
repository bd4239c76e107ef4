// Command transport is a complete, minimal transport for fabric, written
// to be read: it speaks the transport contract (docs/transport-contract.md)
// with nothing but Go's standard library, as a program in any language
// would. Every message goes over a TCP connection of its own:
//
//	[8-byte message id][8-byte size] then size bytes (or, for a stream,
//	bytes until the sender stops)
//
// Run it next to fabric's own transports with a scheme such as
//
//	mine: {transport: {command: ["./bin/transport"]}}
//
// after `go build -o bin/transport ./examples/transport`.
package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

const port = "7100"

// message is one line of the schedule (only the fields used here).
type message struct {
	ID      uint64 `json:"id"`
	TimeNS  int64  `json:"t_ns"`
	Src     string `json:"src"`
	Dst     string `json:"dst"`
	DstAddr string `json:"dst_addr"`
	Size    int64  `json:"size"`
	Pattern string `json:"pattern"`
	Stream  bool   `json:"stream"`
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "transport:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	host, addr := os.Getenv("FABRIC_HOST"), os.Getenv("FABRIC_ADDR")
	start, err := strconv.ParseInt(os.Getenv("FABRIC_START_NS"), 10, 64)
	if err != nil {
		return fmt.Errorf("FABRIC_START_NS: %w", err)
	}
	schedule, err := readSchedule(os.Getenv("FABRIC_SCHEDULE"))
	if err != nil {
		return err
	}
	rec, err := newRecorder(os.Getenv("FABRIC_RECORDS"))
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(addr, port))
	if err != nil {
		return err
	}
	go receive(ctx, ln, schedule, start, rec)
	fmt.Println("ready") // the contract's ready line
	send(ctx, host, schedule, start, rec)
	<-ctx.Done() // SIGTERM: the trial is over
	ln.Close()
	return rec.close()
}

func readSchedule(path string) (map[uint64]message, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[uint64]message{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m message
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		out[m.ID] = m
	}
	return out, sc.Err()
}

// send sends every message whose source is this host at its time, each on
// a goroutine of its own (open loop: nothing waits for an earlier message).
func send(ctx context.Context, host string, schedule map[uint64]message, start int64, rec *recorder) {
	var mine []message
	for _, m := range schedule {
		if m.Src == host {
			mine = append(mine, m)
		}
	}
	sort.Slice(mine, func(i, j int) bool { return mine[i].TimeNS < mine[j].TimeNS })
	for _, m := range mine {
		at := time.Unix(0, start+m.TimeNS)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(at)):
		}
		rec.sent(time.Since(at))
		go func() {
			if err := sendOne(ctx, m); err != nil && ctx.Err() == nil {
				fmt.Fprintf(os.Stderr, "message %d to %s: %v\n", m.ID, m.Dst, err)
			}
		}()
	}
}

func sendOne(ctx context.Context, m message) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(m.DstAddr, port))
	if err != nil {
		return err
	}
	defer c.Close()
	var hdr [16]byte
	binary.BigEndian.PutUint64(hdr[:8], m.ID)
	binary.BigEndian.PutUint64(hdr[8:], uint64(m.Size))
	if _, err := c.Write(hdr[:]); err != nil {
		return err
	}
	buf := make([]byte, 64<<10)
	if m.Stream {
		go func() { <-ctx.Done(); c.Close() }()
		for {
			if _, err := c.Write(buf); err != nil {
				return nil // the trial ended
			}
		}
	}
	for left := m.Size; left > 0; left -= int64(len(buf)) {
		if _, err := c.Write(buf[:min(left, int64(len(buf)))]); err != nil {
			return err
		}
	}
	return nil
}

// receive accepts one connection per message and records it when its last
// byte has arrived (a stream: every 100 ms, and when it ends).
func receive(ctx context.Context, ln net.Listener, schedule map[uint64]message, start int64, rec *recorder) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			var hdr [16]byte
			if _, err := io.ReadFull(c, hdr[:]); err != nil {
				return
			}
			m := schedule[binary.BigEndian.Uint64(hdr[:8])]
			var got atomic.Int64
			if m.Stream {
				stopSamples := rec.sampleEvery(100*time.Millisecond, m, &got)
				defer stopSamples()
			}
			buf := make([]byte, 64<<10)
			for m.Stream || got.Load() < m.Size {
				n, err := c.Read(buf)
				got.Add(int64(n))
				if err != nil {
					break
				}
			}
			rec.flow(m, start, got.Load())
		}()
	}
}

// recorder writes records as JSON lines, one writer for all goroutines.
type recorder struct {
	mu               sync.Mutex
	f                *os.File
	w                *bufio.Writer
	sends, late      int64
	lateSum, lateMax time.Duration
}

func newRecorder(path string) (*recorder, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &recorder{f: f, w: bufio.NewWriter(f)}, nil
}

func (r *recorder) write(v any) {
	b, _ := json.Marshal(v)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.w.Write(append(b, '\n'))
}

// flow records a delivered message: start is its scheduled send time.
func (r *recorder) flow(m message, start, bytes int64) {
	r.write(map[string]any{"type": "flow", "id": m.ID, "pattern": m.Pattern, "src": m.Src, "dst": m.Dst,
		"size": m.Size, "bytes": bytes, "cc": "example", "start_ns": start + m.TimeNS, "end_ns": time.Now().UnixNano()})
}

func (r *recorder) sampleEvery(d time.Duration, m message, got *atomic.Int64) (stop func()) {
	t := time.NewTicker(d)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case now := <-t.C:
				r.write(map[string]any{"type": "sample", "flow_id": m.ID, "src": m.Src, "dst": m.Dst, "t_ns": now.UnixNano(), "bytes": got.Load()})
			}
		}
	}()
	return func() { t.Stop(); close(done) }
}

// sent counts one send late by d.
func (r *recorder) sent(d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sends++
	r.lateSum += d
	r.lateMax = max(r.lateMax, d)
	if d > time.Millisecond {
		r.late++
	}
}

func (r *recorder) close() error {
	mean := time.Duration(0)
	if r.sends > 0 {
		mean = r.lateSum / time.Duration(r.sends)
	}
	r.write(map[string]any{"type": "sender", "host": os.Getenv("FABRIC_HOST"), "sends": r.sends,
		"late_over_1ms": r.late, "late_mean_ns": mean.Nanoseconds(), "late_max_ns": r.lateMax.Nanoseconds()})
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.w.Flush(); err != nil {
		return err
	}
	return r.f.Close()
}
