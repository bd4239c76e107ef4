package transporttest

import (
	"testing"
	"time"

	"github.com/fabric-emu/fabric/hosts/transport"
)

// ExpectIdle lets a test's endpoints, which have nothing to send or
// receive, start their loops, then measures this process's CPU over 2 s
// and fails t unless it stayed under 1 % of a core: idle endpoints must
// have no timer running.
func ExpectIdle(t testing.TB) {
	t.Helper()
	time.Sleep(200 * time.Millisecond) // the loops start
	const idle = 2 * time.Second
	cpu0 := transport.CPUTime()
	time.Sleep(idle)
	used := transport.CPUTime() - cpu0
	t.Logf("idle endpoints: %v of CPU in %v (%.2f %% of a core)", used, idle, 100*used.Seconds()/idle.Seconds())
	if used > idle/100 {
		t.Errorf("idle endpoints used %v of CPU in %v, want under 1 %% of a core", used, idle)
	}
}
