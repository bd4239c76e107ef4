package transporttest

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fabric-emu/fabric/hosts/transport"
)

// Delivery is the receiving application of a transport that hands it
// messages' bytes (NDP's deliver): it checks that every message's bytes
// arrive in order, each byte once, each the byte want writes for its place.
type Delivery struct {
	want func(b []byte, id uint64, off int64)
	mu   sync.Mutex
	next map[uint64]int64 // the next offset expected
	errs []error
}

// NewDelivery checks bytes against want.
func NewDelivery(want func(b []byte, id uint64, off int64)) *Delivery {
	return &Delivery{want: want, next: map[uint64]int64{}}
}

// Deliver takes b, the bytes of message id from offset off.
func (d *Delivery) Deliver(id uint64, off int64, b []byte) {
	want := make([]byte, len(b))
	d.want(want, id, off)
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case off != d.next[id]:
		d.errs = append(d.errs, fmt.Errorf("message %d: delivered offset %d, want %d", id, off, d.next[id]))
	case !bytes.Equal(b, want):
		d.errs = append(d.errs, fmt.Errorf("message %d: wrong bytes at offset %d", id, off))
	}
	d.next[id] = off + int64(len(b))
}

// Of is how many bytes of message id arrived in order.
func (d *Delivery) Of(id uint64) int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.next[id]
}

// Bytes is how many bytes of every message arrived in order.
func (d *Delivery) Bytes() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	var n int64
	for _, b := range d.next {
		n += b
	}
	return n
}

// Check fails t for every delivery out of order or of wrong bytes, and
// for every message of sched but streams that did not arrive whole.
func (d *Delivery) Check(t testing.TB, sched []transport.Message) {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, err := range d.errs {
		t.Error(err)
	}
	for _, m := range sched {
		if !m.Stream && d.next[m.ID] != m.Size {
			t.Errorf("message %d (%s→%s): %d of %d bytes delivered", m.ID, m.Src, m.Dst, d.next[m.ID], m.Size)
		}
	}
}

// Await polls done every 20 ms until it holds, and fails t if it does not
// within limit.
func Await(t testing.TB, limit time.Duration, what string, done func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !done() {
		if time.Now().After(deadline) {
			t.Errorf("%s: not after %v", what, limit)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}
