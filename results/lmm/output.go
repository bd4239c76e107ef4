package lmm

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/fabric-emu/fabric/results/stats"
)

// PacketsHeader is the first line of the per-packet CSV.
const PacketsHeader = "ingress_ns,egress_ns,latency_ns,src,dst,proto,sport,dport,ip_id,ip_len\n"

// PacketWriter streams one CSV row per matched packet. Formatting costs as
// much as matching, so rows are handed over in batches to a goroutine that
// formats them by hand (fmt would cost more again) and writes them: on
// this 2-core machine the two halves then run in parallel.
type PacketWriter struct {
	bw    *bufio.Writer
	buf   []byte
	batch []row
	work  chan []row
	free  chan []row
	done  chan error
}

type row struct {
	in, out int64
	h       header
}

const batchRows = 4096

// NewPacketWriter writes the header and returns a writer to w. Call Flush
// (Matcher.Finish does) to write the last rows and stop the goroutine.
func NewPacketWriter(w io.Writer) (*PacketWriter, error) {
	bw := bufio.NewWriterSize(w, 1<<20)
	if _, err := bw.WriteString(PacketsHeader); err != nil {
		return nil, err
	}
	pw := &PacketWriter{
		bw:    bw,
		buf:   make([]byte, 0, 128),
		batch: make([]row, 0, batchRows),
		work:  make(chan []row, 4),
		free:  make(chan []row, 4),
		done:  make(chan error, 1),
	}
	// The goroutine gets the channel itself, not pw.work: Flush sets the
	// field to nil, and a goroutine not yet running when a short
	// measurement flushed read nil and waited forever (a CI hang).
	go pw.run(pw.work)
	return pw, nil
}

func (pw *PacketWriter) run(work <-chan []row) {
	var err error
	for rows := range work {
		for i := range rows {
			if err == nil {
				err = pw.write(rows[i].in, rows[i].out, &rows[i].h)
			}
		}
		select {
		case pw.free <- rows[:0]:
		default:
		}
	}
	if err == nil {
		err = pw.bw.Flush()
	}
	pw.done <- err
}

func (pw *PacketWriter) add(in, out int64, h *header) {
	pw.batch = append(pw.batch, row{in: in, out: out, h: *h})
	if len(pw.batch) == batchRows {
		pw.work <- pw.batch
		select {
		case pw.batch = <-pw.free:
		default:
			pw.batch = make([]row, 0, batchRows)
		}
	}
}

func (pw *PacketWriter) write(in, out int64, h *header) error {
	b := pw.buf[:0]
	b = strconv.AppendInt(b, in, 10)
	b = append(b, ',')
	b = strconv.AppendInt(b, out, 10)
	b = append(b, ',')
	b = strconv.AppendInt(b, out-in, 10)
	b = append(b, ',')
	b = appendIPv4(b, h.key.Src)
	b = append(b, ',')
	b = appendIPv4(b, h.key.Dst)
	b = append(b, ',')
	b = strconv.AppendUint(b, uint64(h.key.Proto), 10)
	b = append(b, ',')
	b = strconv.AppendUint(b, uint64(h.key.SPort), 10)
	b = append(b, ',')
	b = strconv.AppendUint(b, uint64(h.key.DPort), 10)
	b = append(b, ',')
	b = strconv.AppendUint(b, uint64(h.key.ID), 10)
	b = append(b, ',')
	b = strconv.AppendUint(b, uint64(h.ipLen), 10)
	b = append(b, '\n')
	pw.buf = b
	_, err := pw.bw.Write(b)
	return err
}

// Flush writes the remaining rows and stops the writer; the PacketWriter
// must not be used afterwards.
func (pw *PacketWriter) Flush() error {
	if pw.work == nil {
		return errors.New("lmm: PacketWriter flushed twice")
	}
	if len(pw.batch) > 0 {
		pw.work <- pw.batch
	}
	close(pw.work)
	pw.work = nil
	return <-pw.done
}

func appendIPv4(b []byte, a uint32) []byte {
	b = strconv.AppendUint(b, uint64(a>>24), 10)
	b = append(b, '.')
	b = strconv.AppendUint(b, uint64(a>>16&0xff), 10)
	b = append(b, '.')
	b = strconv.AppendUint(b, uint64(a>>8&0xff), 10)
	b = append(b, '.')
	return strconv.AppendUint(b, uint64(a&0xff), 10)
}

// Files names the outputs of one LMM measurement in a directory.
type Files struct {
	Packets string // NAME.packets.csv: one row per matched packet
	CDF     string // NAME.cdf.csv: latency_us,fraction
	Summary string // NAME.summary.json: counts and statistics
}

// FilesFor returns the output names for measurement name in dir.
func FilesFor(dir, name string) Files {
	base := filepath.Join(dir, name)
	return Files{Packets: base + ".packets.csv", CDF: base + ".cdf.csv", Summary: base + ".summary.json"}
}

// Summary is what NAME.summary.json holds; report reads it back.
type Summary struct {
	Name    string        `json:"name"`
	Ingress []string      `json:"ingress"`
	Egress  string        `json:"egress"`
	Mode    string        `json:"mode"`
	Counts  Counts        `json:"counts"`
	US      stats.Summary `json:"latency_us"` // microseconds
	// Probe is the probe stream's own latency (Result.Probe), in µs.
	Probe *ProbeSummary `json:"probe,omitempty"`
}

// ProbeSummary is ProbeResult in microseconds.
type ProbeSummary struct {
	Matched int64         `json:"matched"`
	Lost    int64         `json:"lost"`
	US      stats.Summary `json:"latency_us"`
}

// cdfPoints bounds the CDF file: 2000 exact steps draw a smooth curve and
// keep the file small even for millions of packets.
const cdfPoints = 2000

// writeSummary writes the CDF and summary files of r.
func writeSummary(f Files, s Summary, r *Result) error {
	us := make([]float64, len(r.sorted))
	for i, v := range r.sorted {
		us[i] = v / 1e3
	}
	cdf, err := os.Create(f.CDF)
	if err != nil {
		return err
	}
	err = stats.WriteCDF(cdf, "latency_us", stats.CDF(us, cdfPoints))
	if err = errors.Join(err, cdf.Close()); err != nil {
		return fmt.Errorf("lmm: %s: %w", f.CDF, err)
	}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(f.Summary, append(b, '\n'), 0o644)
}

// ReadSummary reads a NAME.summary.json file.
func ReadSummary(path string) (*Summary, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var s Summary
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &s, nil
}

// Times is when one matched packet reached the switch and left it
// (CLOCK_REALTIME ns): a row of the per-packet CSV.
type Times struct{ In, Out int64 }

// Latency is the packet's time in the switch, ns.
func (t Times) Latency() int64 { return t.Out - t.In }

// ReadTimes reads the times of every packet of a per-packet CSV
// (PacketsHeader), in its order; errors name the file and line.
func ReadTimes(path string) ([]Times, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() || sc.Text()+"\n" != PacketsHeader {
		return nil, fmt.Errorf("%s:1: header is not %q", path, strings.TrimSpace(PacketsHeader))
	}
	var out []Times
	for line := 2; sc.Scan(); line++ {
		fields := strings.SplitN(sc.Text(), ",", 3)
		if len(fields) < 3 {
			return nil, fmt.Errorf("%s:%d: want ingress_ns,egress_ns,…", path, line)
		}
		in, err1 := strconv.ParseInt(fields[0], 10, 64)
		eg, err2 := strconv.ParseInt(fields[1], 10, 64)
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		out = append(out, Times{In: in, Out: eg})
	}
	return out, sc.Err()
}
