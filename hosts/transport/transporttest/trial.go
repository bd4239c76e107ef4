package transporttest

import (
	"fmt"
	"testing"

	"github.com/fabric-emu/fabric/hosts/transport"
)

// ReadTrial returns every message scheduled in a trial directory and every
// record the transports wrote there.
func ReadTrial(t testing.TB, dir string) (map[uint64]transport.Message, *transport.Set) {
	t.Helper()
	sched, err := transport.ReadScheduleDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	set, err := transport.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return sched, set
}

// Fataler is what DeliveredOnce reports to: a test, or one attempt of a
// retried check (testenv.Attempt).
type Fataler interface {
	Helper()
	Fatalf(format string, args ...any)
}

// DeliveredOnce fails t unless every scheduled message has exactly one
// record, of its whole size between its own hosts, and no record is of a
// message that was not scheduled. check, when given, judges each record
// against its message as well.
func DeliveredOnce(t Fataler, sched map[uint64]transport.Message, set *transport.Set, check func(transport.Flow, transport.Message) string) {
	t.Helper()
	seen := map[uint64]bool{}
	for _, f := range set.Flows {
		m, ok := sched[f.ID]
		switch {
		case !ok:
			t.Fatalf("record of unscheduled message %d", f.ID)
		case seen[f.ID]:
			t.Fatalf("message %d recorded twice", f.ID)
		case f.Bytes != m.Size || f.Size != m.Size || f.Src != m.Src || f.Dst != m.Dst:
			t.Fatalf("record %+v for message %+v", f, m)
		}
		if check != nil {
			if msg := check(f, m); msg != "" {
				t.Fatalf("message %d: %s", f.ID, msg)
			}
		}
		seen[f.ID] = true
	}
	if len(seen) != len(sched) {
		t.Fatalf("%d of %d messages delivered", len(seen), len(sched))
	}
}

// SentBy is a DeliveredOnce check that every record names cc, the
// sender's congestion control or transport.
func SentBy(cc string) func(transport.Flow, transport.Message) string {
	return func(f transport.Flow, _ transport.Message) string {
		if f.CC != cc {
			return fmt.Sprintf("sent by %q, want %q", f.CC, cc)
		}
		return ""
	}
}
