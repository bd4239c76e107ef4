package homa

import (
	"testing"
	"time"

	"github.com/fabric-emu/fabric/hosts/transport/transporttest"
)

// Two endpoints with nothing to send or receive sleep: over 2 s they use
// under 1 % of a core together. Their timers tick every millisecond here
// (half the 2 ms resend timeout) while a message is under way.
func TestTimersSleepWhileIdle(t *testing.T) {
	net := transporttest.NewNetwork(1)
	net.MaxDelay = time.Microsecond
	eps, stop := pair(t, net, nil)
	defer stop()
	transporttest.ExpectIdle(t)
	for _, e := range eps {
		if e.busy() {
			t.Errorf("%s is busy with no message", e.env.Host)
		}
	}
}
