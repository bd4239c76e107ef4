package validation

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/fabric-emu/fabric/experiments"
	"github.com/fabric-emu/fabric/hosts/transport"
	"github.com/fabric-emu/fabric/results/lmm"
	"github.com/fabric-emu/fabric/results/report"
)

// trial is what the checks read of one trial directory.
type trial struct {
	dir     string
	summary *report.TrialSummary
	meta    meta
	fid     report.Fidelity
}

// meta is the part of meta.json the checks use.
type meta struct {
	report.Meta
	PointSpec experiments.Point `json:"point_spec"`
}

func openTrial(sum *report.TrialSummary) (*trial, error) {
	t := &trial{dir: sum.Dir, summary: sum}
	if err := readJSON(filepath.Join(sum.Dir, report.MetaFile), &t.meta); err != nil {
		return nil, err
	}
	if err := readJSON(filepath.Join(sum.Dir, "fidelity.json"), &t.fid); err != nil {
		return nil, err
	}
	return t, nil
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// packet is one packet the LMM matched: when it reached the switch and
// when its port let it go, ns.
type packet = lmm.Times

// packets reads the LMM's matched packets (the trial's one measurement)
// in the order they arrived.
func (t *trial) packets() ([]packet, error) {
	files, err := filepath.Glob(lmm.FilesFor(filepath.Join(t.dir, "lmm"), "*").Packets)
	if err != nil || len(files) != 1 {
		return nil, fmt.Errorf("%s: want one LMM measurement, found %d (%v)", t.dir, len(files), err)
	}
	out, err := lmm.ReadTimes(files[0])
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b packet) int { return cmp.Compare(a.In, b.In) })
	return out, nil
}

// queueSample is one row of the trial's queue.csv.
type queueSample struct {
	at                                             int64
	backlogBytes, backlogPkts, sentBytes, sentPkts float64
	counted                                        float64 // -1 without a threshold marker
}

// queue reads the port's sampled queue (experiments.QueueFile).
func (t *trial) queue() ([]queueSample, error) {
	path := filepath.Join(t.dir, experiments.QueueFile)
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan()
	var out []queueSample
	for line := 2; sc.Scan(); line++ {
		fields := strings.Split(sc.Text(), ",")
		if len(fields) != 6 {
			return nil, fmt.Errorf("%s:%d: want %s", path, line, experiments.QueueHeader)
		}
		var v [6]float64
		for i, s := range fields {
			if v[i], err = strconv.ParseFloat(s, 64); err != nil {
				return nil, fmt.Errorf("%s:%d: %w", path, line, err)
			}
		}
		out = append(out, queueSample{at: int64(v[0]), backlogBytes: v[1], backlogPkts: v[2], sentBytes: v[3], sentPkts: v[4], counted: v[5]})
	}
	if len(out) < 2 {
		return nil, fmt.Errorf("%s: %d samples, want many", path, len(out))
	}
	return out, sc.Err()
}

// records reads the transports' records.
func (t *trial) records() (*transport.Set, error) { return transport.ReadDir(t.dir) }

// bottleneck is the fidelity record of the port towards the receiver (the
// first the runner watches).
func (t *trial) bottleneck() (report.PortRate, error) {
	if len(t.fid.Ports) == 0 {
		return report.PortRate{}, fmt.Errorf("%s: fidelity.json has no port counters", t.dir)
	}
	return t.fid.Ports[0], nil
}
