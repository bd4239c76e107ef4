package experiments

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/fabric-emu/fabric/hosts/transport"
)

// collectRecords brings the transports' records into the trial directory
// (from the containers' run directory) and checks every line against the
// contract: a malformed line, a record of a message the schedule never
// had, or a second flow record of one message fails the trial with the
// scheme, the host, the file and the line. It counts the messages no
// record says were delivered.
func (t *trial) collectRecords() error {
	if t.epDir != t.dir {
		if err := copyRecords(t.epDir, t.dir); err != nil {
			return err
		}
	}
	rc, err := checkRecords(t.dir, t.plan.schedule.Len(), 1)
	if err != nil {
		return err
	}
	if p := append(rc.problems, rc.dups...); len(p) > 0 {
		return t.failure(p[0].host, errors.New(p[0].msg))
	}
	t.unrecorded = len(rc.unrecorded)
	return nil
}

// recordsCheck is what a trial's records files say against its schedule.
type recordsCheck struct {
	problems []hostProblem // lines that break the contract, in file order
	dups     []hostProblem // second flow records of a message
	// flows are the flow records by message, each with where it is.
	flows map[uint64]placedFlow
	// unrecorded are the scheduled messages with no flow record.
	unrecorded []uint64
}

// hostProblem is a contract rule a host's transport broke.
type hostProblem struct {
	host, msg string
}

// placedFlow is a flow record and the file and line it is on.
type placedFlow struct {
	transport.Flow
	host string // the host whose records file holds it
	at   string // file:line
}

// checkRecords reads every records file in dir line by line: every line
// must be a record of the contract (transport.CheckRecord), every flow
// and sample must name a message of the schedule (IDs 1..messages), and a
// message has one flow record at most. It stops after limit problems
// (0: none).
func checkRecords(dir string, messages, limit int) (*recordsCheck, error) {
	files, err := filepath.Glob(filepath.Join(dir, "records-*.jsonl"))
	if err != nil {
		return nil, err
	}
	rc := &recordsCheck{flows: map[uint64]placedFlow{}}
	for _, f := range files {
		host := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), "records-"), ".jsonl")
		if err := rc.readFile(f, host, messages, limit); err != nil {
			return nil, err
		}
	}
	for id := uint64(1); id <= uint64(messages); id++ {
		if _, ok := rc.flows[id]; !ok {
			rc.unrecorded = append(rc.unrecorded, id)
		}
	}
	return rc, nil
}

// readFile checks one records file, host's.
func (rc *recordsCheck) readFile(path, host string, messages, limit int) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan() && (limit == 0 || len(rc.problems) < limit); n++ {
		line := sc.Bytes()
		if len(line) == 0 {
			continue
		}
		problem := func(format string, a ...any) {
			rc.problems = append(rc.problems, hostProblem{host, fmt.Sprintf("%s:%d: ", path, n) + fmt.Sprintf(format, a...)})
		}
		if err := transport.CheckRecord(line); err != nil {
			problem("malformed record: %v", err)
			continue
		}
		var rec struct {
			Type   transport.Type `json:"type"`
			FlowID uint64         `json:"flow_id"`
			transport.Flow
		}
		json.Unmarshal(line, &rec)
		id := rec.ID
		switch rec.Type {
		case transport.TypeSample:
			id = rec.FlowID
		case transport.TypeFlow:
		default:
			continue
		}
		if id < 1 || id > uint64(messages) {
			problem("a record of message %d, which the schedule (messages 1..%d) does not have", id, messages)
			continue
		}
		if rec.Type != transport.TypeFlow {
			continue
		}
		if first, ok := rc.flows[id]; ok {
			rc.dups = append(rc.dups, hostProblem{host, fmt.Sprintf("%s:%d: a second flow record of message %d (the first: %s)", path, n, id, first.at)})
			continue
		}
		rc.flows[id] = placedFlow{Flow: rec.Flow, host: host, at: fmt.Sprintf("%s:%d", path, n)}
	}
	return sc.Err()
}

// copyRecords copies the records files from src to dst.
func copyRecords(src, dst string) error {
	files, err := filepath.Glob(filepath.Join(src, "records-*.jsonl"))
	if err != nil {
		return err
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dst, filepath.Base(f)), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}
