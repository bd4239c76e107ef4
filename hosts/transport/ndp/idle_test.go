package ndp

import (
	"testing"

	"github.com/fabric-emu/fabric/hosts/transport/transporttest"
)

// Two endpoints with nothing to send or receive sleep: over 2 s they use
// under 1 % of a core together. Ticking their timers every 5 ms while idle
// cost an NDP process about 6 % of a core on this machine.
func TestIdleEndpointsSleep(t *testing.T) {
	_, stop := pair(t, lossy(1, 0, 0), nil, newDelivery(), nil)
	defer stop()
	transporttest.ExpectIdle(t)
}
