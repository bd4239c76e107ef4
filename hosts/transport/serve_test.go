package transport

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeEndpoint records what Serve asks of it.
type fakeEndpoint struct {
	mu      sync.Mutex
	calls   []string
	out     []Message
	started []uint64
}

func (f *fakeEndpoint) call(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, name)
}

func (f *fakeEndpoint) Begin(_ context.Context, out []Message) func(Message) {
	f.call("begin")
	f.out = out
	return func(m Message) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.started = append(f.started, m.ID)
	}
}

func (f *fakeEndpoint) Close() { f.call("close") }

func (f *fakeEndpoint) Finish(w *Writer) error {
	f.call("finish")
	return w.Counts("packets", map[string]int64{"data_sent": 3})
}

// serveEnv is h0's environment with a schedule of two messages it sends
// (10 and 20 ms after the start, written out of order) and one it
// receives, starting now.
func serveEnv(t *testing.T) *Env {
	t.Helper()
	dir := t.TempDir()
	env := &Env{Host: "h0", Schedule: filepath.Join(dir, ScheduleFileName("h0")), Records: filepath.Join(dir, FileName("h0")),
		StartNS: time.Now().UnixNano()}
	sched := []Message{{ID: 2, TimeNS: 20e6, Src: "h0", Dst: "h1", Size: 1}, {ID: 1, TimeNS: 10e6, Src: "h0", Dst: "h1", Size: 1},
		{ID: 3, Src: "h1", Dst: "h0", Size: 1}}
	if err := WriteScheduleFile(env.Schedule, sched); err != nil {
		t.Fatal(err)
	}
	return env
}

// Serve opens the endpoint with the host's schedule and records, prints
// the ready line, starts the host's own messages in time order, and when
// ctx ends closes the endpoint, then writes its counters and the host's
// lateness into the records.
func TestServeLifeCycle(t *testing.T) {
	env := serveEnv(t)
	ep := &fakeEndpoint{}
	var opened []Message
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	var stdout strings.Builder
	err := Serve(ctx, env, &stdout, func(_ context.Context, sched []Message, w *Writer) (Endpoint, error) {
		opened = sched
		return ep, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if stdout.String() != ReadyLine+"\n" || len(opened) != 3 {
		t.Fatalf("stdout %q, endpoint opened with %d messages; want the ready line and 3", stdout.String(), len(opened))
	}
	if want := []string{"begin", "close", "finish"}; !slices.Equal(ep.calls, want) || len(ep.out) != 2 || !slices.Equal(ep.started, []uint64{1, 2}) {
		t.Fatalf("calls %v, %d outgoing, started %v; want %v, 2 and [1 2]", ep.calls, len(ep.out), ep.started, want)
	}
	set, err := ReadDir(filepath.Dir(env.Records))
	if err != nil {
		t.Fatal(err)
	}
	if len(set.Metrics) != 1 || len(set.Senders) != 1 || set.Senders[0].Sends != 2 {
		t.Fatalf("records: metrics %+v, senders %+v; want the endpoint's count and one sender record of 2 sends", set.Metrics, set.Senders)
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("stdout closed") }

// When the ready line cannot be written, Serve closes the endpoint and the
// records at once and returns the error, without starting anything.
func TestServeClosesWhenReadyFails(t *testing.T) {
	env := serveEnv(t)
	ep := &fakeEndpoint{}
	var w *Writer
	err := Serve(context.Background(), env, failingWriter{}, func(_ context.Context, _ []Message, rw *Writer) (Endpoint, error) {
		w = rw
		return ep, nil
	})
	if err == nil || !strings.Contains(err.Error(), "stdout closed") {
		t.Fatalf("Serve = %v, want the ready line's error", err)
	}
	if !slices.Equal(ep.calls, []string{"close"}) || len(ep.started) != 0 {
		t.Fatalf("calls %v, started %v; want only close", ep.calls, ep.started)
	}
	if err := w.f.Close(); err == nil {
		t.Fatal("the records file was left open")
	}
}

// A failure to open the endpoint closes the records and is returned.
func TestServeClosesRecordsWhenOpenFails(t *testing.T) {
	env := serveEnv(t)
	var w *Writer
	err := Serve(context.Background(), env, nil, func(_ context.Context, _ []Message, rw *Writer) (Endpoint, error) {
		w = rw
		return nil, errors.New("no socket")
	})
	if err == nil || err.Error() != "no socket" {
		t.Fatalf("Serve = %v, want the endpoint's error", err)
	}
	if err := w.f.Close(); err == nil {
		t.Fatal("the records file was left open")
	}
}
