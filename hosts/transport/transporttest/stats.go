package transporttest

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// SumStats sums counters of the stats line each of fabric's own
// transports logs when it stops (msg="homa stats", msg="ndp stats", with
// name=value fields) over every host log of a trial's logs directory. It
// fails t unless every host's log has that line with every named counter,
// so a missing or renamed counter cannot read as zero.
func SumStats(t testing.TB, logsDir, msg string, names ...string) map[string]int64 {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(logsDir, "*.transport.log"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no transport logs in %s: %v", logsDir, err)
	}
	sums := map[string]int64{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		found := map[string]bool{}
		for line := range strings.Lines(string(b)) {
			if !strings.Contains(line, `msg="`+msg+`"`) {
				continue
			}
			for field := range strings.FieldsSeq(line) {
				k, v, ok := strings.Cut(field, "=")
				if !ok || !slices.Contains(names, k) {
					continue
				}
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					t.Fatalf("%s: %s: %v", f, field, err)
				}
				sums[k] += n
				found[k] = true
			}
		}
		for _, k := range names {
			if !found[k] {
				t.Fatalf("%s has no %q line with %s", f, msg, k)
			}
		}
	}
	return sums
}
