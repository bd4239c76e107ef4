package experiments

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/fabric-emu/fabric/hosts/transport"
)

// drainPoll is how often the drain looks for the last flow records: a
// tenth of the shortest drain (poisson's 1 s) at most is waited for
// nothing, and reading only the records' new lines costs microseconds.
const drainPoll = 50 * time.Millisecond

// recordWatch follows a trial's records files through the drain and says
// when every message of the schedule has a whole flow record: from then on
// the drain has nothing left to wait for. Transports that write their
// records through after the schedule's end (transport.Writer) make this
// visible as their messages finish; one that buffers them to its exit
// simply gets the whole drain.
type recordWatch struct {
	dir     string
	pending map[uint64]int64 // scheduled message → size, while not recorded whole
	read    map[string]int64 // bytes of each file read, up to its last full line
}

// newRecordWatch watches dir for s's messages, or returns nil when the
// drain must run its length: a stream runs until SIGTERM.
func newRecordWatch(dir string, s *Schedule) *recordWatch {
	w := &recordWatch{dir: dir, pending: make(map[uint64]int64, s.Len()), read: map[string]int64{}}
	for i := range s.Len() {
		m := s.Message(i)
		if m.Stream {
			return nil
		}
		w.pending[m.ID] = m.Size
	}
	return w
}

// done reads the records' new full lines and reports whether every
// message is in. A file it cannot read now is read at the next poll.
func (w *recordWatch) done() bool {
	files, _ := filepath.Glob(filepath.Join(w.dir, "records-*.jsonl"))
	for _, f := range files {
		if len(w.pending) == 0 {
			break
		}
		w.readNew(f)
	}
	return len(w.pending) == 0
}

func (w *recordWatch) readNew(path string) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	if _, err := f.Seek(w.read[path], io.SeekStart); err != nil {
		return
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return
	}
	end := bytes.LastIndexByte(b, '\n')
	if end < 0 {
		return
	}
	w.read[path] += int64(end + 1)
	for line := range bytes.SplitSeq(b[:end], []byte{'\n'}) {
		var r struct {
			Type  transport.Type `json:"type"`
			ID    uint64         `json:"id"`
			Bytes int64          `json:"bytes"`
		}
		if json.Unmarshal(line, &r) != nil || r.Type != transport.TypeFlow {
			continue
		}
		if size, ok := w.pending[r.ID]; ok && r.Bytes == size {
			delete(w.pending, r.ID)
		}
	}
}
