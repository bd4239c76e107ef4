package transport

// Records are the contract's output: JSON lines, one record a line, each
// tagged with its type. Every transport process writes its own file,
// records-<host>[.<role>].jsonl, named by Env.Records. The schema is the
// compatibility surface between transports and the analysis (results/);
// change it only by adding fields.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
)

// Type tags a record line.
type Type string

const (
	TypeFlow   Type = "flow"   // one completed flow or request/response
	TypeQuery  Type = "query"  // one incast query (completes at the last response)
	TypeProbe  Type = "probe"  // one received LMM probe packet
	TypeSample Type = "sample" // a periodic throughput sample of a long-lived flow
	TypeSender Type = "sender" // how late one process sent against its schedule
	TypeMetric Type = "metric" // a figure only the transport knows (retransmissions, grants)
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
	// LateP50NS and LateP99NS are percentiles of the lateness, to the µs
	// (to 2 ms; past it, LateMaxNS): an open-loop arrival process is
	// judged by them against its packets' time on the link.
	LateP50NS int64 `json:"late_p50_ns,omitempty"`
	LateP99NS int64 `json:"late_p99_ns,omitempty"`
}

// Metric is a figure only the transport knows, such as its
// retransmissions or the grants it sent. Without TNS it is a count over
// the whole trial, written once at exit: the report sums it over the
// hosts. With TNS it is one sample of something that varies (a window, a
// backlog): the report averages the samples.
type Metric struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	Unit  string  `json:"unit"`           // what Value counts or measures: packets, bytes, µs
	TNS   int64   `json:"t_ns,omitempty"` // CLOCK_REALTIME ns of a sample
}

// Writer appends records to a file through a buffer, so recording a flow
// costs no syscall on the traffic path. It is safe for concurrent use.
type Writer struct {
	mu  sync.Mutex
	f   *os.File
	buf *bufio.Writer
	// through: from this instant every record goes to the file at once
	// (WriteThroughFrom).
	through time.Time
	flush   *time.Timer
}

// WriteThroughFrom flushes the buffer at at and writes every later record
// through at once. From the schedule's end the runner reads the records to
// end the drain as soon as every message is in; a record costs a syscall
// then, when the traffic is winding down.
func (w *Writer) WriteThroughFrom(at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.through = at
	w.flush = time.AfterFunc(time.Until(at), func() { w.Flush() })
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
	if err := w.buf.WriteByte('\n'); err != nil {
		return err
	}
	if !w.through.IsZero() && time.Now().After(w.through) {
		return w.buf.Flush()
	}
	return nil
}

func (w *Writer) Flow(r Flow) error     { return w.put(TypeFlow, r) }
func (w *Writer) Query(r Query) error   { return w.put(TypeQuery, r) }
func (w *Writer) Probe(r Probe) error   { return w.put(TypeProbe, r) }
func (w *Writer) Sample(r Sample) error { return w.put(TypeSample, r) }
func (w *Writer) Sender(r Sender) error { return w.put(TypeSender, r) }
func (w *Writer) Metric(r Metric) error { return w.put(TypeMetric, r) }

// Counts writes one count (a Metric without time) per name in unit.
func (w *Writer) Counts(unit string, counts map[string]int64) error {
	names := make([]string, 0, len(counts))
	for n := range counts {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := w.Metric(Metric{Name: n, Value: float64(counts[n]), Unit: unit}); err != nil {
			return err
		}
	}
	return nil
}

// Flush writes buffered records to the file.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Flush()
}

// Close flushes and closes the file.
func (w *Writer) Close() error {
	w.mu.Lock()
	if w.flush != nil {
		w.flush.Stop()
	}
	w.mu.Unlock()
	return errors.Join(w.Flush(), w.f.Close())
}

// Set is every record read from a run directory.
type Set struct {
	Flows   []Flow
	Queries []Query
	Probes  []Probe
	Samples []Sample
	Senders []Sender
	Metrics []Metric
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
		case TypeMetric:
			var v Metric
			err = json.Unmarshal(b, &v)
			s.Metrics = append(s.Metrics, v)
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

// required are the fields a record of each type must carry; the others
// may be left out, and are then zero (class and query: none).
var required = map[Type][]string{
	TypeFlow:   {"id", "src", "dst", "size", "bytes", "start_ns", "end_ns"},
	TypeQuery:  {"id", "aggregator", "start_ns", "end_ns"},
	TypeProbe:  {"seq", "send_ns", "recv_ns"},
	TypeSample: {"flow_id", "t_ns", "bytes"},
	TypeSender: {"host", "sends", "late_over_1ms", "late_mean_ns", "late_max_ns"},
	TypeMetric: {"name", "value", "unit"},
}

// CheckRecord checks one line of a records file against the contract: a
// JSON object of a known type, with that type's required fields, each of
// its type. It is stricter than Set.Read, which reads what it can.
func CheckRecord(line []byte) error {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(line, &fields); err != nil {
		return err
	}
	var t Type
	if err := json.Unmarshal(fields["type"], &t); err != nil || t == "" {
		return errors.New(`no "type" string`)
	}
	want, ok := required[t]
	if !ok {
		return fmt.Errorf("unknown record type %q", t)
	}
	var missing []string
	for _, f := range want {
		if _, ok := fields[f]; !ok {
			missing = append(missing, f)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s record without %s", t, strings.Join(missing, ", "))
	}
	var one Set
	if err := one.Read("", bytes.NewReader(line)); err != nil {
		return errors.Unwrap(err) // without Read's "name:line: "
	}
	return nil
}
