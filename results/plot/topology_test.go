package plot

import (
	"image/png"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"

	"github.com/fabric-emu/fabric/emu"
)

// smallLab has two tiers of switches, links of two kinds between hosts
// and edges (so they are labelled one by one), and uniform edge-core
// links (labelled once for the pair of rows).
const smallLab = `name: small
topology:
  kind: custom
  nodes:
    h1: {kind: host}
    h2: {kind: host}
    e1: {kind: switch, tier: edge}
    e2: {kind: switch, tier: edge}
    c1: {kind: switch, tier: core}
  links:
    - endpoints: [h1:eth0, e1:eth1]
      delay: {up: 1ms, down: 2ms}
    - endpoints: [h2:eth0, e2:eth1]
    - endpoints: [e1:eth2, c1:eth1]
    - endpoints: [e2:eth2, c1:eth2]
    - endpoints: [e1:eth3, e2:eth3]
links: {rate: 10Mbit, fabric: {rate: 100Mbit}}
`

func smallGraph(t *testing.T) *emu.Graph {
	t.Helper()
	spec, err := emu.Parse("small.yaml", []byte(smallLab))
	if err != nil {
		t.Fatal(err)
	}
	g, err := spec.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestTopologyLayout checks the drawing's nodes, rows and links against
// the lab file's.
func TestTopologyLayout(t *testing.T) {
	g := smallGraph(t)
	d := LayoutTopology(g, "small", map[string]PortCounters{
		"e1:eth1": {Drops: 3, Marks: 40}, // towards h1
		"c1:eth2": {},                    // nothing to say
	})
	rows := map[string]int{}
	for _, n := range d.Nodes {
		rows[n.Name] = n.Row
	}
	want := map[string]int{"c1": 0, "e1": 1, "e2": 1, "h1": 2, "h2": 2}
	if len(rows) != len(want) {
		t.Fatalf("nodes %v, want %v", rows, want)
	}
	for n, r := range want {
		if got, ok := rows[n]; !ok || got != r {
			t.Errorf("node %s in row %d (present %v), want row %d", n, got, ok, r)
		}
	}
	var links []string
	labels := map[string]string{}
	for _, l := range d.Links {
		a, b := d.Nodes[l.A].Name, d.Nodes[l.B].Name
		links = append(links, a+"-"+b)
		labels[a+"-"+b] = l.Label
	}
	slices.Sort(links)
	if wantLinks := []string{"e1-c1", "e1-e2", "e2-c1", "h1-e1", "h2-e2"}; !slices.Equal(links, wantLinks) {
		t.Errorf("links %v, want %v", links, wantLinks)
	}
	wantLabels := map[string]string{
		"h1-e1": "10Mbit, 1ms up, 2ms down", // the host links differ: each says its own
		"h2-e2": "10Mbit",
		"e1-c1": "", // said once for the row pair
		"e2-c1": "",
		"e1-e2": "100Mbit", // within a row: never a row pair's label
	}
	for l, w := range wantLabels {
		if labels[l] != w {
			t.Errorf("link %s labelled %q, want %q", l, labels[l], w)
		}
	}
	var rowTexts []string
	for _, r := range d.RowLabels {
		rowTexts = append(rowTexts, r.Text)
	}
	slices.Sort(rowTexts)
	if w := []string{"2 × 100Mbit", "core", "edge", "hosts"}; !slices.Equal(rowTexts, w) {
		t.Errorf("row labels %q, want %q", rowTexts, w)
	}
	if len(d.Ports) != 1 || d.Ports[0].Text != "3 drops, 40 marks" || !d.Ports[0].Hot {
		t.Errorf("port texts %+v, want one hot \"3 drops, 40 marks\"", d.Ports)
	}
	e1, h1 := d.Nodes[slices.IndexFunc(d.Nodes, func(n DiagramNode) bool { return n.Name == "e1" })].At,
		d.Nodes[slices.IndexFunc(d.Nodes, func(n DiagramNode) bool { return n.Name == "h1" })].At
	if p := d.Ports[0].At; p.Y >= e1.Y || p.Y <= h1.Y || e1.Y-p.Y > (e1.Y-h1.Y)/2 {
		t.Errorf("e1:eth1's counters at y %v, want on its link nearer e1 (%v) than h1 (%v)", p.Y, e1.Y, h1.Y)
	}
}

// TestTopologyFiles draws the small lab and reads both files back: the
// SVG names every node and link label, the PNG decodes at the layout's size.
func TestTopologyFiles(t *testing.T) {
	base := filepath.Join(t.TempDir(), "small")
	if err := Topology(base, smallGraph(t), "small", nil); err != nil {
		t.Fatal(err)
	}
	svg, err := os.ReadFile(base + ".svg")
	if err != nil {
		t.Fatal(err)
	}
	texts := map[string]bool{}
	for _, m := range regexp.MustCompile(`>([^<]+)</text>`).FindAllSubmatch(svg, -1) {
		texts[string(m[1])] = true
	}
	for _, w := range []string{"h1", "h2", "e1", "e2", "c1", "10Mbit, 1ms up, 2ms down", "100Mbit", "2 × 100Mbit", "small"} {
		if !texts[w] {
			t.Errorf("SVG has no text %q; it has %v", w, texts)
		}
	}
	f, err := os.Open(base + ".png")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	d := LayoutTopology(smallGraph(t), "small", nil)
	if w := int(d.Width.Dots(96) + 0.5); img.Bounds().Dx() != w {
		t.Errorf("PNG is %d px wide, want %d (the layout's width at 96 dpi)", img.Bounds().Dx(), w)
	}
}
