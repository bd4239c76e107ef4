package tc

import (
	"errors"
	"strings"
	"testing"

	"github.com/fabric-emu/fabric/internal/units"
	"github.com/fabric-emu/fabric/internal/yamlfile"
)

// NDP and fair queueing settings that cannot be built, or that contradict
// the rest of the port, are FieldErrors naming the field.
func TestResolveBadNDPAndFair(t *testing.T) {
	ndp := &NDPSpec{}
	pk := func(n int) *Buffer { return &Buffer{Packets: n} }
	cases := []struct {
		name  string
		spec  PortSettings
		field string
		msg   string
	}{
		{"ndp one band", PortSettings{NDP: ndp, Queues: &QueuesSpec{Bands: 1}}, "queues.bands", "needs two bands"},
		{"ndp three bands", PortSettings{NDP: ndp, Queues: &QueuesSpec{Bands: 3}}, "queues.bands", "exactly two bands"},
		{"ndp conflicting weights", PortSettings{NDP: ndp, Queues: &QueuesSpec{Weights: []int{4, 1}}}, "queues.weights", "conflicts with ndp"},
		{"ndp weights against its ratio", PortSettings{NDP: &NDPSpec{Ratio: 5}, Queues: &QueuesSpec{Weights: []int{10, 1}}}, "queues.weights", "serves 5 headers to 1 data packet"},
		{"ndp with ecn", PortSettings{NDP: ndp, Marking: &MarkingSpec{ECN: &ECNSpec{Threshold: 30 * units.KB}}}, "marking", "trims packets instead of marking"},
		{"ndp with phantom", PortSettings{NDP: ndp, Marking: &MarkingSpec{Phantom: &PhantomSpec{Drain: 0.95, Threshold: units.KB}}}, "marking", "trims packets instead of marking"},
		{"ndp with fair", PortSettings{NDP: ndp, Queues: &QueuesSpec{Fair: true}}, "queues.fair", "cannot be split into flow buckets"},
		{"ndp negative ratio", PortSettings{NDP: &NDPSpec{Ratio: -1}}, "ndp.ratio", "want 1..1000"},
		{"ndp data below a frame", PortSettings{NDP: &NDPSpec{Data: &Buffer{Bytes: 1000}}}, "ndp.data", "full-size frame"},
		{"ndp header below a header", PortSettings{NDP: &NDPSpec{Header: &Buffer{Bytes: 40}}}, "ndp.header", "one trimmed header"},
		{"buckets without fair", PortSettings{Queues: &QueuesSpec{Buckets: 8}}, "queues.buckets", "add fair: true"},
		{"one bucket", PortSettings{Queues: &QueuesSpec{Fair: true, Buckets: 1}}, "queues.buckets", "want 2..64"},
		{"too many buckets", PortSettings{Queues: &QueuesSpec{Fair: true, Buckets: 65}}, "queues.buckets", "want 2..64"},
		{"buckets below a frame", PortSettings{Buffer: &Buffer{Bytes: 20 * units.KB}, Queues: &QueuesSpec{Fair: true}}, "queues.buckets", "less than one full-size frame"},
		{"packet buckets below a packet", PortSettings{Buffer: pk(10), Queues: &QueuesSpec{Fair: true}}, "queues.buckets", "less than one full-size frame"},
	}
	for _, c := range cases {
		_, err := c.spec.Resolve(units.Gbit, 1500)
		var fe *yamlfile.FieldError
		if !errors.As(err, &fe) {
			t.Errorf("%s: %v, want a FieldError", c.name, err)
			continue
		}
		if fe.Path != c.field || !strings.Contains(fe.Err.Error(), c.msg) {
			t.Errorf("%s: %s: %v; want %s: …%s…", c.name, fe.Path, fe.Err, c.field, c.msg)
		}
	}
}

// A lab file's ports section with an NDP tier over ECN defaults: the
// conflict only shows once the layers are merged (what emu resolves for
// each port), and the error points at the tier's line and field.
func TestNDPConflictInLabFile(t *testing.T) {
	src := `ports:
  marking: {ecn: {threshold: 30KB}}
  tiers:
    edge:
      ndp: {data: 8pkts}
      queues: {weights: [4, 1]}
`
	var f struct {
		Ports SwitchPorts `yaml:"ports"`
	}
	doc, err := yamlfile.Decode("topo.yaml", []byte(src), &f)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Ports.Validate([]string{"edge"}); err == nil || !strings.Contains(doc.Wrap(yamlfile.In("ports", err)).Error(), "topo.yaml:6: ports.tiers.edge.queues.weights: [4 1] conflicts with ndp") {
		t.Errorf("the tier's own conflict: %v", doc.Wrap(yamlfile.In("ports", err)))
	}
	f.Ports.Tiers["edge"] = PortSettings{NDP: &NDPSpec{}}
	for _, l := range f.Ports.Layers("ports") {
		if l.Path != "ports.tiers.edge" {
			continue
		}
		_, err := l.Settings.Resolve(units.Gbit, 1500)
		got := doc.Wrap(yamlfile.In(l.Path, err))
		if got == nil || !strings.HasPrefix(got.Error(), "topo.yaml:4: ports.tiers.edge.marking: an NDP port trims") {
			t.Errorf("merged conflict: %v", got)
		}
	}
}

func TestResolveNDPAndFair(t *testing.T) {
	buf := Buffer{Bytes: 150 * units.KB}
	p, err := PortSettings{Buffer: &buf, NDP: &NDPSpec{}}.Resolve(units.Gbit, 1500)
	if err != nil {
		t.Fatal(err)
	}
	// The paper's switch: 8 data packets, the header queue the same bytes
	// (12112 = 8 × 1514: 195 headers of 62 bytes), 10:1.
	if p.Bands != 2 || *p.NDP != (NDP{Data: Buffer{Packets: 8}, Header: Buffer{Bytes: 8 * 1514}, Ratio: 10}) {
		t.Errorf("default NDP port: bands %d, %+v", p.Bands, p.NDP)
	}
	if p.bandShare(0).quantum != 10*62 || p.bandShare(1).quantum != 1514 || p.bandShare(0).prio != p.bandShare(1).prio {
		t.Errorf("NDP classes: header %+v, data %+v; want quanta 620 and 1514 at one priority", p.bandShare(0), p.bandShare(1))
	}
	if w := p.Warnings(); len(w) != 1 || !strings.Contains(w[0], "not used by an NDP port") {
		t.Errorf("warnings %q, want the unused buffer", w)
	}
	p, err = PortSettings{Buffer: &buf, Queues: &QueuesSpec{Weights: []int{3, 1}, Fair: true}}.Resolve(units.Gbit, 1500)
	if err != nil {
		t.Fatal(err)
	}
	if p.Buckets != DefaultBuckets || p.bucketBuffer() != (Buffer{Bytes: 150 * units.KB / 16}) {
		t.Errorf("fair port: %d buckets of %v", p.Buckets, p.bucketBuffer())
	}
	if s := p.bucketShare(1); s.prio != 0 || s.quantum != 1514 || s.burst != 1514 {
		t.Errorf("bucket class %+v", s)
	}
	for minor, want := range map[uint16][2]int{0x10: {0, -1}, 0x17: {7, -1}, 0x100: {0, 0}, 0x20f: {1, 15}, 0x83f: {7, 63}} {
		if b, k, ok := classBand(minor); !ok || b != want[0] || k != want[1] {
			t.Errorf("classBand(%#x) = %d, %d, %v; want %v", minor, b, k, ok, want)
		}
	}
	for _, minor := range []uint16{0x1, 0xfe, 0x18, 0x140, 0x900} {
		if _, _, ok := classBand(minor); ok {
			t.Errorf("classBand(%#x) claims a class fabric does not build", minor)
		}
	}
}
