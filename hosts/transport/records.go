package transport

// Records are the contract's output: JSON lines, one record a line, each
// tagged with its type. Every transport process writes its own file,
// records-<host>[.<role>].jsonl, named by Env.Records. The schema is the
// compatibility surface between transports and the analysis (results/);
// change it only by adding fields.

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"sync"
)

// Type tags a record line.
type Type string

const (
	TypeFlow   Type = "flow"   // one completed flow or request/response
	TypeQuery  Type = "query"  // one incast query (completes at the last response)
	TypeProbe  Type = "probe"  // one received LMM probe packet
	TypeSample Type = "sample" // a periodic throughput sample of a long-lived flow
	TypeSender Type = "sender" // how late one process sent against its schedule
)

// Flow is one delivered message of the schedule (Message.ID). StartNS is
// the message's scheduled send time (Env.StartNS + Message.TimeNS), not
// when the sender got round to it, so a late sender shows in the
// completion time; EndNS is when its last byte reached the receiving
// application. For a Stream message, Bytes is what arrived by the end of
// the trial and EndNS when the last of it did.
type Flow struct {
	ID      uint64 `json:"id"`
	Pattern string `json:"pattern"`
	Src     string `json:"src"`
	Dst     string `json:"dst"`
	Size    int64  `json:"size"`  // bytes scheduled
	Bytes   int64  `json:"bytes"` // bytes delivered
	DSCP    uint8  `json:"dscp"`
	CC      string `json:"cc"`       // the sender's congestion control, or the transport's name
	StartNS int64  `json:"start_ns"` // CLOCK_REALTIME ns; all namespaces share the clock
	EndNS   int64  `json:"end_ns"`
	Class   string `json:"class,omitempty"` // Message.Class
	Query   uint64 `json:"query,omitempty"` // Message.Query
}

// FCTNanos is the flow completion time.
func (f Flow) FCTNanos() int64 { return f.EndNS - f.StartNS }

// Query is one incast query: an aggregator asks Workers senders for Size
// bytes each; it completes when the last response has arrived.
type Query struct {
	ID         uint64 `json:"id"`
	Aggregator string `json:"aggregator"`
	Workers    int    `json:"workers"`
	Size       int64  `json:"size"` // bytes per worker
	StartNS    int64  `json:"start_ns"`
	EndNS      int64  `json:"end_ns"`
}

// Probe is one received probe packet (HULL §5.2's 1500-byte packet every
// 1 ms). One-way delay is RecvNS-SendNS, exact because every namespace
// reads the same kernel clock.
type Probe struct {
	Seq    uint64 `json:"seq"`
	Src    string `json:"src"`
	Dst    string `json:"dst"`
	DSCP   uint8  `json:"dscp"`
	SendNS int64  `json:"send_ns"`
	RecvNS int64  `json:"recv_ns"`
}

// Sample is a throughput sample of a long-lived flow: the cumulative bytes
// received by TNS.
type Sample struct {
	FlowID uint64 `json:"flow_id"`
	Src    string `json:"src"`
	Dst    string `json:"dst"`
	TNS    int64  `json:"t_ns"`
	Bytes  int64  `json:"bytes"`
}

// Sender is one process's lateness against its schedule, written once at
// exit. A message sent more than a millisecond after its time counts as
// late: an open-loop schedule that the CPU could not keep is flagged, not
// believed.
type Sender struct {
	Host        string `json:"host"`
	Sends       int64  `json:"sends"`
	LateOver1ms int64  `json:"late_over_1ms"`
	LateMeanNS  int64  `json:"late_mean_ns"`
	LateMaxNS   int64  `json:"late_max_ns"`
}

// Writer appends records to a file through a buffer, so recording a flow
// costs no syscall on the traffic path. It is safe for concurrent use.
type Writer struct {
	mu  sync.Mutex
	f   *os.File
	buf *bufio.Writer
}

// FileName is the records file of one endpoint.
func FileName(host string) string { return "records-" + host + ".jsonl" }

// Create opens dir/records-<host>.jsonl for appending.
func Create(dir, host string) (*Writer, error) {
	f, err := os.OpenFile(filepath.Join(dir, FileName(host)), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("records: %w", err)
	}
	return NewWriter(f), nil
}

// NewWriter writes to f, which Close closes.
func NewWriter(f *os.File) *Writer {
	buf := bufio.NewWriterSize(f, 256<<10)
	return &Writer{f: f, buf: buf}
}

// put writes {"type":"<t>", <the record's fields>}. The record types share
// field names (id, src, start_ns), so the tag is spliced in front of the
// record's own JSON rather than embedded.
func (w *Writer) put(t Type, rec any) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.WriteString(`{"type":"` + string(t) + `",`)
	w.buf.Write(b[1:])
	return w.buf.WriteByte('\n')
}

func (w *Writer) Flow(r Flow) error     { return w.put(TypeFlow, r) }
func (w *Writer) Query(r Query) error   { return w.put(TypeQuery, r) }
func (w *Writer) Probe(r Probe) error   { return w.put(TypeProbe, r) }
func (w *Writer) Sample(r Sample) error { return w.put(TypeSample, r) }
func (w *Writer) Sender(r Sender) error { return w.put(TypeSender, r) }

// Flush writes buffered records to the file.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Flush()
}

// Close flushes and closes the file.
func (w *Writer) Close() error {
	return errors.Join(w.Flush(), w.f.Close())
}

// Set is every record read from a run directory.
type Set struct {
	Flows   []Flow
	Queries []Query
	Probes  []Probe
	Samples []Sample
	Senders []Sender
}

// ReadDir reads every records-*.jsonl file in dir.
func ReadDir(dir string) (*Set, error) {
	files, err := filepath.Glob(filepath.Join(dir, "records-*.jsonl"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	s := &Set{}
	for _, name := range files {
		if err := s.readFile(name); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func (s *Set) readFile(name string) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	return s.Read(name, f)
}

// Read adds the records in r; name is used in errors.
func (s *Set) Read(name string, r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		var head struct {
			Type Type `json:"type"`
		}
		b := sc.Bytes()
		if len(b) == 0 {
			continue
		}
		if err := json.Unmarshal(b, &head); err != nil {
			return fmt.Errorf("%s:%d: %w", name, n, err)
		}
		var err error
		switch head.Type {
		case TypeFlow:
			var v Flow
			err = json.Unmarshal(b, &v)
			s.Flows = append(s.Flows, v)
		case TypeQuery:
			var v Query
			err = json.Unmarshal(b, &v)
			s.Queries = append(s.Queries, v)
		case TypeProbe:
			var v Probe
			err = json.Unmarshal(b, &v)
			s.Probes = append(s.Probes, v)
		case TypeSample:
			var v Sample
			err = json.Unmarshal(b, &v)
			s.Samples = append(s.Samples, v)
		case TypeSender:
			var v Sender
			err = json.Unmarshal(b, &v)
			s.Senders = append(s.Senders, v)
		default:
			err = fmt.Errorf("unknown record type %q", head.Type)
		}
		if err != nil {
			return fmt.Errorf("%s:%d: %w", name, n, err)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}
