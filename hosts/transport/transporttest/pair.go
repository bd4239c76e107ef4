// Package transporttest runs a transport's endpoints in one test process,
// joined by an in-memory network the test controls, and reads back the
// records they wrote, as the experiment runner would.
package transporttest

import (
	"context"
	"net/netip"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/fabric-emu/fabric/hosts/transport"
)

// Peers are the two hosts of a pair, a (10.0.0.1) and b (10.0.0.2).
var Peers = []transport.Peer{
	{Name: "a", Addr: netip.MustParseAddr("10.0.0.1")},
	{Name: "b", Addr: netip.MustParseAddr("10.0.0.2")},
}

// Start is how a test builds and starts one endpoint: from its host's
// environment and records writer; it runs the endpoint's loops with goes,
// which they must leave when ctx ends.
type Start func(env *transport.Env, w *transport.Writer, goes func(loop func(ctx context.Context)))

// Pair starts an endpoint on each of Peers, each with its own records file
// and an environment of 1500-byte MTU, linkRate bit/s and a 200 µs RTT.
// The returned function stops both, closes their records and reads them
// back.
func Pair(t testing.TB, linkRate int64, start Start) (stop func() *transport.Set) {
	t.Helper()
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	var writers []*transport.Writer
	var wg sync.WaitGroup
	goes := func(loop func(context.Context)) { wg.Go(func() { loop(ctx) }) }
	for _, p := range Peers {
		env := &transport.Env{Host: p.Name, Addr: p.Addr, Peers: Peers, MTU: 1500, LinkRate: linkRate,
			RTT: 200 * time.Microsecond, StartNS: time.Now().UnixNano()}
		w, err := transport.OpenRecords(filepath.Join(dir, transport.FileName(p.Name)))
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		writers = append(writers, w)
		start(env, w, goes)
	}
	return func() *transport.Set {
		cancel()
		wg.Wait()
		for _, w := range writers {
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
		}
		set, err := transport.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		return set
	}
}

// BothWays is a schedule of one message of each size from a to b and one
// from b to a (Peers), all at time 0, numbered from 1.
func BothWays(sizes []int64) []transport.Message {
	var sched []transport.Message
	for i, x := range sizes {
		for dir := range 2 {
			p, q := Peers[dir], Peers[1-dir]
			sched = append(sched, transport.Message{ID: uint64(2*i + dir + 1), Src: p.Name, SrcAddr: p.Addr, Dst: q.Name, DstAddr: q.Addr, Size: x})
		}
	}
	return sched
}
