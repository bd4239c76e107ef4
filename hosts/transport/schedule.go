package transport

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Message is one line of a schedule: Src sends Size bytes to Dst at
// TimeNS after the trial's start instant (Env.StartNS).
type Message struct {
	ID      uint64     `json:"id"`   // unique within the trial
	TimeNS  int64      `json:"t_ns"` // send time, ns after Env.StartNS
	Src     string     `json:"src"`
	SrcAddr netip.Addr `json:"src_addr"`
	Dst     string     `json:"dst"`
	DstAddr netip.Addr `json:"dst_addr"`
	Size    int64      `json:"size"` // bytes; 0 for a Stream
	DSCP    uint8      `json:"dscp"` // the code point its packets carry (0..63)
	Class   string     `json:"class,omitempty"`
	Pattern string     `json:"pattern"`         // dynamic, incast, static, permutation
	Query   uint64     `json:"query,omitempty"` // incast: the query this response belongs to
	// Stream marks a long-lived flow: send as fast as the transport may
	// until SIGTERM. The receiver writes a Sample of the bytes received
	// every 100 ms and a Flow with what arrived when it stops.
	Stream bool `json:"stream,omitempty"`
}

// ScheduleFileName is the schedule of one host in a trial directory.
func ScheduleFileName(host string) string { return "schedule-" + host + ".jsonl" }

// IsScheduleFile says whether name is a host's schedule (ScheduleFileName).
func IsScheduleFile(name string) bool {
	host, ok := strings.CutPrefix(name, "schedule-")
	host, ok2 := strings.CutSuffix(host, ".jsonl")
	return ok && ok2 && host != ""
}

// WriteSchedule writes msgs as JSON lines.
func WriteSchedule(w io.Writer, msgs []Message) error {
	bw := bufio.NewWriterSize(w, 256<<10)
	enc := json.NewEncoder(bw)
	for i := range msgs {
		if err := enc.Encode(&msgs[i]); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// WriteScheduleFile writes msgs to path.
func WriteScheduleFile(path string, msgs []Message) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := WriteSchedule(f, msgs); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// ReadSchedule reads JSON lines of Message; name is used in errors, which
// give the line.
func ReadSchedule(name string, r io.Reader) ([]Message, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var out []Message
	for n := 1; sc.Scan(); n++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var m Message
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", name, n, err)
		}
		out = append(out, m)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return out, nil
}

// ReadScheduleFile reads the schedule at path.
func ReadScheduleFile(path string) ([]Message, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadSchedule(path, f)
}

// Outgoing are the messages of sched that host sends, in schedule order.
func Outgoing(sched []Message, host string) []Message {
	var out []Message
	for _, m := range sched {
		if m.Src == host {
			out = append(out, m)
		}
	}
	return out
}

// AppendMessage appends m as one JSON line, exactly as encoding/json would
// write it, without reflection: a schedule of millions of messages is
// written in a fraction of the time.
func AppendMessage(b []byte, m Message) []byte {
	b = append(b, `{"id":`...)
	b = strconv.AppendUint(b, m.ID, 10)
	b = append(b, `,"t_ns":`...)
	b = strconv.AppendInt(b, m.TimeNS, 10)
	b = append(b, `,"src":`...)
	b = strconv.AppendQuote(b, m.Src)
	b = append(b, `,"src_addr":"`...)
	b = m.SrcAddr.AppendTo(b)
	b = append(b, `","dst":`...)
	b = strconv.AppendQuote(b, m.Dst)
	b = append(b, `,"dst_addr":"`...)
	b = m.DstAddr.AppendTo(b)
	b = append(b, `","size":`...)
	b = strconv.AppendInt(b, m.Size, 10)
	b = append(b, `,"dscp":`...)
	b = strconv.AppendUint(b, uint64(m.DSCP), 10)
	if m.Class != "" {
		b = append(b, `,"class":`...)
		b = strconv.AppendQuote(b, m.Class)
	}
	b = append(b, `,"pattern":`...)
	b = strconv.AppendQuote(b, m.Pattern)
	if m.Query != 0 {
		b = append(b, `,"query":`...)
		b = strconv.AppendUint(b, m.Query, 10)
	}
	if m.Stream {
		b = append(b, `,"stream":true`...)
	}
	return append(b, "}\n"...)
}

// ReadScheduleDir reads every host's schedule in a trial directory and
// returns each message once, by id (a message is in both its sender's and
// its receiver's file).
func ReadScheduleDir(dir string) (map[uint64]Message, error) {
	files, err := filepath.Glob(filepath.Join(dir, ScheduleFileName("*")))
	if err != nil {
		return nil, err
	}
	out := map[uint64]Message{}
	for _, f := range files {
		msgs, err := ReadScheduleFile(f)
		if err != nil {
			return nil, err
		}
		for _, m := range msgs {
			out[m.ID] = m
		}
	}
	return out, nil
}
