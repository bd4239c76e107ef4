package ndp

import (
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"
)

// Two endpoints with nothing to send or receive sleep: over 2 s they use
// under 1 % of a core together. Ticking their timers every 5 ms while idle
// cost an NDP process about 6 % of a core on this machine.
func TestIdleEndpointsSleep(t *testing.T) {
	net := &network{rng: rand.New(rand.NewPCG(1, 2)), endpoints: map[netip.Addr]*endpoint{}, paths: map[int]int{}}
	_, stop := pair(t, net, nil, &delivery{next: map[uint64]int64{}})
	defer stop()
	time.Sleep(200 * time.Millisecond) // the loops start
	const idle = 2 * time.Second
	cpu0 := cpuTime()
	time.Sleep(idle)
	used := cpuTime() - cpu0
	t.Logf("two idle endpoints: %v of CPU in %v (%.2f %% of a core)", used, idle, 100*used.Seconds()/idle.Seconds())
	if used > idle/100 {
		t.Errorf("idle endpoints used %v of CPU in %v, want under 1 %% of a core", used, idle)
	}
}
