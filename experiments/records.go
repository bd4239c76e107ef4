package experiments

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/fabric-emu/fabric/hosts/transport"
)

// collectRecords brings the transports' records into the trial directory
// (from the containers' run directory) and checks every line against the
// contract: a malformed line, or a record of a message the schedule never
// had, fails the trial with the scheme, the host, the file and the line.
func (t *trial) collectRecords() error {
	if t.epDir != t.dir {
		if err := copyRecords(t.epDir, t.dir); err != nil {
			return err
		}
	}
	files, err := filepath.Glob(filepath.Join(t.dir, "records-*.jsonl"))
	if err != nil {
		return err
	}
	for _, f := range files {
		host := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), "records-"), ".jsonl")
		if err := checkRecords(f, t.plan.schedule.Len()); err != nil {
			return t.failure(host, err)
		}
	}
	return nil
}

// checkRecords reads a records file line by line: every line must be a
// record the results can read, and every flow and sample must name a
// message of the schedule (IDs 1..messages).
func checkRecords(path string, messages int) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Bytes()
		if len(line) == 0 {
			continue
		}
		var one transport.Set
		if err := one.Read(path, strings.NewReader(string(line))); err != nil {
			return fmt.Errorf("%s:%d: malformed record: %v", path, n, unwrapLine(err))
		}
		var ids struct {
			ID     uint64 `json:"id"`
			FlowID uint64 `json:"flow_id"`
		}
		json.Unmarshal(line, &ids)
		id := ids.ID
		if len(one.Samples) > 0 {
			id = ids.FlowID
		}
		scheduled := len(one.Flows)+len(one.Samples) == 0 || (id >= 1 && id <= uint64(messages))
		if !scheduled {
			return fmt.Errorf("%s:%d: a record of message %d, which the schedule (messages 1..%d) does not have", path, n, id, messages)
		}
	}
	return sc.Err()
}

// unwrapLine drops the "name:1: " that Set.Read puts before its error,
// since the caller gives the real line.
func unwrapLine(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, ":1: "); i >= 0 {
		return msg[i+4:]
	}
	return msg
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
