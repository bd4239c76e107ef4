package experiments

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/fabric-emu/fabric/hosts/transport"
	"github.com/fabric-emu/fabric/internal/yamlfile"
	"github.com/fabric-emu/fabric/tc"
)

// QueueSpec is measure.queue: sample the queue of the port towards the
// traffic's receiver through the measured part of the traffic (from the
// warm-up's end, as the LMM's captures), into the trial's queue.csv. Each
// sample is one netlink dump of the port's qdiscs (its backlog and the
// bytes and packets it has sent: about 30 µs here) and, on a port with a
// threshold marker, the marker's counted queue (a map lookup).
//
//	measure: {queue: {every: 250us}}
type QueueSpec struct {
	// Every is the mean time between samples. The gaps are exponential
	// (Poisson sampling), so the samples' mean is the queue's time average
	// whatever the traffic's rhythm (PASTA: Wolff, "Poisson Arrivals See
	// Time Averages", Operations Research 30(2), 1982).
	Every time.Duration `yaml:"every" json:"every"`
}

// QueueFile is the sampled queue in a trial directory.
const QueueFile = "queue.csv"

// QueueHeader is QueueFile's first line: the monotonic clock's ns, the
// qdisc's backlog, what it has sent, and the marker's counted queue (-1
// without one).
const QueueHeader = "at_ns,backlog_bytes,backlog_packets,sent_bytes,sent_packets,counted_bytes"

// leastQueueGap is the shortest mean gap a sampler may ask for: a sample
// costs this machine about 30 µs of CPU, so 100 µs is already a third of
// a core.
const leastQueueGap = 100 * time.Microsecond

func (q *QueueSpec) validate() error {
	if q.Every < leastQueueGap {
		return yamlfile.Field("queue.every", "want a mean gap of at least %v (each sample costs ~30 µs of CPU), got %v", leastQueueGap, q.Every)
	}
	return nil
}

// queueSampler samples one port until stopped.
type queueSampler struct {
	stop chan struct{}
	done chan error
	rows []queueRow
}

type queueRow struct {
	tc.QueueDepth
	counted int64
}

// startQueueSampler starts measure.queue's sampler on the trial's
// bottleneck port, if asked for; stopQueueSampler writes what it read.
func (t *trial) startQueueSampler(ctx context.Context) error {
	spec := t.spec.Measure.Queue
	if spec == nil {
		return nil
	}
	q, err := tc.OpenQueue(t.plan.ports[0].target)
	if err != nil {
		return fmt.Errorf("queue sampler: %w", err)
	}
	s := &queueSampler{stop: make(chan struct{}), done: make(chan error, 1)}
	rng := rand.New(rand.NewPCG(t.seed, 0x9e7e))
	go func() {
		defer q.Close()
		// A thread of its own with fine timer slack, as the senders'
		// clocks: a sample due in 250 µs must not wait for Go's timers.
		transport.PinTimerThread()
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() {
			select {
			case <-s.stop:
			case <-ctx.Done():
			}
			cancel()
		}()
		next := time.Now()
		for {
			next = next.Add(time.Duration(rng.ExpFloat64() * float64(spec.Every)))
			if !transport.SleepUntil(ctx, next) {
				s.done <- nil
				return
			}
			d, err := q.Depth()
			if err != nil {
				s.done <- err
				return
			}
			row := queueRow{QueueDepth: d, counted: -1}
			if c, _, ok, err := q.Counted(); err != nil {
				s.done <- err
				return
			} else if ok {
				row.counted = int64(c)
			}
			s.rows = append(s.rows, row)
		}
	}()
	t.queue = s
	t.onCleanup(func() error { return t.stopQueueSampler() })
	return nil
}

// stopQueueSampler stops the sampler and writes queue.csv, once.
func (t *trial) stopQueueSampler() error {
	s := t.queue
	if s == nil {
		return nil
	}
	t.queue = nil
	close(s.stop)
	if err := <-s.done; err != nil {
		return fmt.Errorf("queue sampler: %w", err)
	}
	f, err := os.Create(filepath.Join(t.dir, QueueFile))
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	w.WriteString(QueueHeader + "\n")
	var b []byte
	for _, r := range s.rows {
		b = strconv.AppendInt(b[:0], r.At, 10)
		for _, v := range []uint64{r.Bytes, r.Packets, r.Sent, r.SentPackets} {
			b = append(b, ',')
			b = strconv.AppendUint(b, v, 10)
		}
		b = append(b, ',')
		b = strconv.AppendInt(b, r.counted, 10)
		w.Write(append(b, '\n'))
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
