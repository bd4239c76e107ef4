package cc

import (
	"bytes"
	"encoding/binary"
	"math"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/fabric-emu/fabric/internal/testenv"
)

// mathHarness runs bpf/dctcp_math.h inside the kernel (BPF_PROG_TEST_RUN on
// the syscall program in bpf/dctcp_math_test.bpf.c): the arithmetic under
// test is the one the congestion control executes.
type mathHarness struct {
	t    *testing.T
	prog *ebpf.Program
}

func newMathHarness(t *testing.T) *mathHarness {
	testenv.RequireRoot(t)
	var objs dctcpMathObjects
	if err := loadDctcpMathObjects(&objs, nil); err != nil {
		t.Fatalf("loading math harness: %v", err)
	}
	t.Cleanup(func() { objs.Close() })
	return &mathHarness{t: t, prog: objs.DctcpMath}
}

func (h *mathHarness) run(in dctcpMathMathArgs) dctcpMathMathArgs {
	h.t.Helper()
	var buf bytes.Buffer
	binary.Write(&buf, binary.NativeEndian, in)
	ctx := buf.Bytes()
	out := make([]byte, len(ctx))
	if _, err := h.prog.Run(&ebpf.RunOptions{Context: ctx, ContextOut: out}); err != nil {
		h.t.Fatalf("test run: %v", err)
	}
	var res dctcpMathMathArgs
	binary.Read(bytes.NewReader(out), binary.NativeEndian, &res)
	return res
}

const alphaOne = 1 << 20 // DCTCP_ALPHA_ONE in bpf/dctcp_math.h

// TestAlphaUpdate checks one α step against the paper's formula
// α ← (1−g)α + gF, g = 1/16, in real numbers.
func TestAlphaUpdate(t *testing.T) {
	h := newMathHarness(t)
	cases := []struct {
		alpha         float64
		acked, marked uint32
	}{
		{1, 14480, 0},
		{1, 14480, 14480},
		{0, 14480, 14480},
		{0.5, 100000, 25000},
		{0.25, 1448, 0},
		{0.001, 64 << 10, 1448},
		{0.75, 3_000_000_000, 1_000_000_000}, // large windows must not overflow
	}
	for _, c := range cases {
		in := dctcpMathMathArgs{Alpha: uint32(c.alpha * alphaOne), Acked: c.acked, Marked: c.marked}
		got := float64(h.run(in).NextAlpha) / alphaOne
		f := float64(c.marked) / float64(c.acked)
		want := (1-1.0/16)*float64(in.Alpha)/alphaOne + f/16
		if math.Abs(got-want) > 2.0/alphaOne {
			t.Errorf("α=%g F=%d/%d: got α'=%.7f, want %.7f", c.alpha, c.marked, c.acked, got, want)
		}
	}
	// A window with nothing acknowledged says nothing about congestion.
	if got := h.run(dctcpMathMathArgs{Alpha: alphaOne / 3, Acked: 0, Marked: 0}).NextAlpha; got != alphaOne/3 {
		t.Errorf("empty window changed α: %d -> %d", alphaOne/3, got)
	}
}

// TestAlphaConverges runs many windows with a constant marked fraction: the
// moving average must settle on that fraction, and after the marks stop it
// must decay to (almost) zero instead of sticking at a rounding floor.
func TestAlphaConverges(t *testing.T) {
	h := newMathHarness(t)
	alpha := uint32(alphaOne)
	for range 300 {
		alpha = h.run(dctcpMathMathArgs{Alpha: alpha, Acked: 100 * 1448, Marked: 30 * 1448}).NextAlpha
	}
	if got := float64(alpha) / alphaOne; math.Abs(got-0.3) > 0.001 {
		t.Errorf("α after 300 windows at F=0.3: %.5f, want 0.3", got)
	}
	for range 300 {
		alpha = h.run(dctcpMathMathArgs{Alpha: alpha, Acked: 100 * 1448}).NextAlpha
	}
	if got := float64(alpha) / alphaOne; got > 1e-4 {
		t.Errorf("α after 300 unmarked windows: %.6f, want < 1e-4", got)
	}
}

// TestCwndReduction checks cwnd·(1−α/2) and the loss halving.
func TestCwndReduction(t *testing.T) {
	h := newMathHarness(t)
	for _, c := range []struct {
		cwnd  uint32
		alpha float64
	}{{100, 1}, {100, 0}, {100, 0.5}, {37, 0.3}, {10, 1}, {2, 1}, {3, 1}, {1 << 20, 0.0625}} {
		got := h.run(dctcpMathMathArgs{Cwnd: c.cwnd, Alpha: uint32(c.alpha * alphaOne)})
		want := math.Max(float64(c.cwnd)*(1-c.alpha/2), 2)
		if math.Abs(float64(got.Reduced)-want) > 1 {
			t.Errorf("cwnd %d α=%g: reduced to %d, want %.1f", c.cwnd, c.alpha, got.Reduced, want)
		}
		if want := max(c.cwnd/2, 2); got.Loss != want {
			t.Errorf("cwnd %d after loss: %d, want %d", c.cwnd, got.Loss, want)
		}
	}
}
