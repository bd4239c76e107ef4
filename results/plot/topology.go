package plot

import (
	"cmp"
	"errors"
	"fmt"
	"image/color"
	"math"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/fabric-emu/fabric/emu"
)

// PortCounters are what a running lab's port has done so far, drawn next
// to the port's end of its link.
type PortCounters struct {
	Drops uint64
	Marks uint64 // ECN and phantom-queue CE marks together
}

// Diagram is a topology laid out for drawing: every node at its place in
// its tier's row (hosts at the bottom), every link between two of them,
// and the labels. Lengths are in vg units (points).
type Diagram struct {
	Title  string
	Width  vg.Length
	Height vg.Length
	Nodes  []DiagramNode
	Links  []DiagramLink
	// RowLabels name each row's tier and, between two rows, their links
	// when all of them share one rate and delay: said once, left of the
	// rows, rather than on each link.
	RowLabels []DiagramText
	Ports     []DiagramText // counters of ports that dropped or marked
}

// DiagramNode is a host or switch at its place.
type DiagramNode struct {
	Name string
	Tier string
	Host bool
	Row  int // 0 is the top row
	At   vg.Point
}

// DiagramLink joins Nodes[A] and Nodes[B]; Label is empty when a row
// label already says it.
type DiagramLink struct {
	A, B  int
	Label string
}

// DiagramText is a label at a point.
type DiagramText struct {
	At   vg.Point
	Text string
	Hot  bool // a port that dropped packets
}

// Sizes of a topology drawing.
const (
	topoSpacing  = 0.6 * vg.Inch // between neighbours in a row
	topoRowGap   = 1.2 * vg.Inch
	topoMargin   = 0.4 * vg.Inch
	topoLabelCol = 1.6 * vg.Inch // left of the rows: the rows' link labels
	topoMaxWidth = 40 * vg.Inch  // a k = 16 fat tree's hosts still fit a PNG
	topoMinWidth = 7 * vg.Inch   // the title's room
	topoBend     = 0.4 * vg.Inch // how far a link within a row bows up
	// topoSwitchPlace is a switch's room in a row in hosts' places.
	topoSwitchPlace = 1.5
	topoTitle       = 0.5 * vg.Inch
	switchW         = 0.52 * vg.Inch
	switchH         = 0.24 * vg.Inch
	hostR           = 0.16 * vg.Inch
	topoFont        = 7 // points
)

// Topology draws g and writes base.png and base.svg: nodes in rows by
// tier, every link with its rate and delay, and, if ports is not empty,
// the drops and marks of each port that has any (ports is keyed by
// "node:ifname").
func Topology(base string, g *emu.Graph, title string, ports map[string]PortCounters) error {
	d := LayoutTopology(g, title, ports)
	var errs []error
	for _, ext := range []string{".png", ".svg"} {
		var c vg.CanvasWriterTo
		if ext == ".png" {
			c = vgimg.PngCanvas{Canvas: vgimg.New(d.Width, d.Height)}
		} else {
			c = vgsvg.New(d.Width, d.Height)
		}
		dc := draw.New(c)
		d.Draw(dc)
		if err := writeFile(base+ext, c); err != nil {
			errs = append(errs, fmt.Errorf("topology %s%s: %w", base, ext, err))
		}
	}
	return errors.Join(errs...)
}

// LayoutTopology places g's nodes: one row per tier, ordered by how many
// hops the tier is from the hosts (the farthest at the top), each row's
// nodes in the graph's order, which keeps a fat tree's pods together.
func LayoutTopology(g *emu.Graph, title string, ports map[string]PortCounters) Diagram {
	rows := tierRows(g)
	widest := 1 // in hosts' places: a switch takes more room than a host
	for _, r := range rows {
		w := len(r)
		if r[0].Kind == emu.SwitchNode {
			w = int(math.Ceil(float64(w) * topoSwitchPlace))
		}
		widest = max(widest, w)
	}
	spacing := min(topoSpacing, (topoMaxWidth-topoLabelCol-2*topoMargin)/vg.Length(widest))
	d := Diagram{
		Title:  title,
		Width:  max(topoMinWidth, topoLabelCol+2*topoMargin+spacing*vg.Length(widest)),
		Height: topoTitle + 2*topoMargin + topoRowGap*vg.Length(len(rows)-1),
	}
	index := map[*emu.Node]int{}
	for ri, r := range rows {
		y := d.Height - topoTitle - topoMargin - topoRowGap*vg.Length(ri)
		// Spread each row over the widest one's width, so that a fat
		// tree's switches sit above the nodes they connect.
		step := spacing * vg.Length(widest) / vg.Length(len(r))
		for i, n := range r {
			index[n] = len(d.Nodes)
			d.Nodes = append(d.Nodes, DiagramNode{Name: n.Name, Tier: n.Tier, Host: n.Kind == emu.HostNode, Row: ri,
				At: vg.Point{X: topoLabelCol + topoMargin + step*(vg.Length(i)+0.5), Y: y}})
		}
		d.RowLabels = append(d.RowLabels, DiagramText{At: vg.Point{X: topoMargin, Y: y}, Text: tierName(r[0])})
	}
	d.labelLinks(g, index)
	d.Ports = portTexts(g, index, d.Nodes, ports)
	return d
}

// tierName is what a row is called: its switches' tier, or "hosts".
func tierName(n *emu.Node) string {
	if n.Kind == emu.HostNode {
		return "hosts"
	}
	return n.Tier
}

// tierRows groups g's nodes by tier and orders the tiers by their hop
// distance from the nearest host (hosts first), then by name; the result
// is top row first.
func tierRows(g *emu.Graph) [][]*emu.Node {
	dist := hopsFromHosts(g)
	byTier := map[string][]*emu.Node{}
	rank := map[string]int{}
	for _, n := range g.Nodes {
		t := n.Tier
		if n.Kind == emu.HostNode {
			t = "host"
		}
		if _, ok := rank[t]; !ok {
			rank[t] = math.MaxInt
		}
		byTier[t] = append(byTier[t], n)
		rank[t] = min(rank[t], dist[n])
	}
	tiers := make([]string, 0, len(byTier))
	for t := range byTier {
		tiers = append(tiers, t)
	}
	slices.SortFunc(tiers, func(a, b string) int {
		return cmp.Or(cmp.Compare(rank[b], rank[a]), strings.Compare(a, b))
	})
	rows := make([][]*emu.Node, len(tiers))
	for i, t := range tiers {
		rows[i] = byTier[t]
	}
	return rows
}

// hopsFromHosts is each node's distance in links from the nearest host; a
// node no host reaches gets one more than the farthest that one does.
func hopsFromHosts(g *emu.Graph) map[*emu.Node]int {
	dist := map[*emu.Node]int{}
	var queue []*emu.Node
	for _, n := range g.Hosts() {
		dist[n] = 0
		queue = append(queue, n)
	}
	far := 0
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		far = max(far, dist[n])
		for _, i := range n.Ifaces {
			if _, seen := dist[i.Peer.Node]; !seen {
				dist[i.Peer.Node] = dist[n] + 1
				queue = append(queue, i.Peer.Node)
			}
		}
	}
	for _, n := range g.Nodes {
		if _, ok := dist[n]; !ok {
			dist[n] = far + 1
		}
	}
	return dist
}

// labelLinks adds every link, labelled once per pair of rows when all of
// that pair's links say the same, else each on its own.
func (d *Diagram) labelLinks(g *emu.Graph, index map[*emu.Node]int) {
	type pair struct{ top, bottom int }
	groups := map[pair][]int{}
	var order []pair
	for _, l := range g.Links {
		a, b := index[l.A.Node], index[l.B.Node]
		p := pair{min(d.Nodes[a].Row, d.Nodes[b].Row), max(d.Nodes[a].Row, d.Nodes[b].Row)}
		if _, ok := groups[p]; !ok {
			order = append(order, p)
		}
		groups[p] = append(groups[p], len(d.Links))
		d.Links = append(d.Links, DiagramLink{A: a, B: b, Label: LinkLabel(l)})
	}
	for _, p := range order {
		links := groups[p]
		same := true
		for _, li := range links {
			same = same && d.Links[li].Label == d.Links[links[0]].Label
		}
		if !same || p.top == p.bottom {
			continue
		}
		ya, yb := d.Nodes[d.Links[links[0]].A].At.Y, d.Nodes[d.Links[links[0]].B].At.Y
		d.RowLabels = append(d.RowLabels, DiagramText{At: vg.Point{X: topoMargin, Y: (ya + yb) / 2},
			Text: fmt.Sprintf("%d × %s", len(links), d.Links[links[0]].Label)})
		for _, li := range links {
			d.Links[li].Label = ""
		}
	}
}

// LinkLabel is a link's rate, then its delay and loss if it has any:
// "10Gbit", "100Mbit, 1ms", "100Mbit, 1ms up, 2ms down, loss 0.1%".
func LinkLabel(l *emu.Link) string {
	parts := []string{l.Rate.String()}
	if d := directions(l.Up.Delay.String(), l.Down.Delay.String(), l.Up.Delay > 0 || l.Down.Delay > 0); d != "" {
		parts = append(parts, d)
	}
	pct := func(p float64) string { return strconv.FormatFloat(100*p, 'g', 4, 64) + "%" }
	if d := directions(pct(l.Up.Loss), pct(l.Down.Loss), l.Up.Loss > 0 || l.Down.Loss > 0); d != "" {
		parts = append(parts, "loss "+d)
	}
	return strings.Join(parts, ", ")
}

// directions is one value when both directions have it, else both named
// as a lab file names them.
func directions(up, down string, has bool) string {
	switch {
	case !has:
		return ""
	case up == down:
		return up
	}
	return up + " up, " + down + " down"
}

// portTexts places each counted port's drops and marks on its link, a
// fifth of the way from the port's node.
func portTexts(g *emu.Graph, index map[*emu.Node]int, nodes []DiagramNode, ports map[string]PortCounters) []DiagramText {
	var out []DiagramText
	for _, l := range g.Links {
		for _, i := range []*emu.Iface{l.A, l.B} {
			c, ok := ports[i.Label()]
			if !ok || c.Drops == 0 && c.Marks == 0 {
				continue
			}
			from, to := nodes[index[i.Node]].At, nodes[index[i.Peer.Node]].At
			at := vg.Point{X: from.X + (to.X-from.X)/5, Y: from.Y + (to.Y-from.Y)/5}
			out = append(out, DiagramText{At: at, Text: counterText(c), Hot: c.Drops > 0})
		}
	}
	return out
}

func counterText(c PortCounters) string {
	var parts []string
	if c.Drops > 0 {
		parts = append(parts, fmt.Sprintf("%d drops", c.Drops))
	}
	if c.Marks > 0 {
		parts = append(parts, fmt.Sprintf("%d marks", c.Marks))
	}
	return strings.Join(parts, ", ")
}

// Colours of a topology drawing.
var (
	linkColour   = color.Gray{Y: 0x90}
	hostColour   = color.RGBA{R: 0xe8, G: 0xe8, B: 0xe8, A: 0xff}
	switchColour = []color.Color{
		color.RGBA{R: 0xc6, G: 0xdb, B: 0xef, A: 0xff},
		color.RGBA{R: 0xc7, G: 0xe9, B: 0xc0, A: 0xff},
		color.RGBA{R: 0xfd, G: 0xd0, B: 0xa2, A: 0xff},
		color.RGBA{R: 0xda, G: 0xda, B: 0xeb, A: 0xff},
	}
	dropColour = color.RGBA{R: 0xc0, A: 0xff}
	markColour = color.RGBA{R: 0x80, G: 0x50, A: 0xff}
)

// Draw paints d on c: links first, so nodes sit on top of them.
func (d Diagram) Draw(c draw.Canvas) {
	c.FillPolygon(color.White, []vg.Point{{}, {X: d.Width}, {X: d.Width, Y: d.Height}, {Y: d.Height}})
	small := textStyle(topoFont, draw.XCenter, draw.YCenter)
	for _, l := range d.Links {
		path := d.LinkPath(l)
		c.StrokeLines(draw.LineStyle{Color: linkColour, Width: vg.Points(0.8)}, path)
		if l.Label != "" {
			at, sty := path[len(path)/2], small
			if len(path) > 2 { // above a bow's top, not on it
				at.Y += vg.Points(2)
				sty.YAlign = draw.YBottom
			}
			c.FillText(sty, at, l.Label)
		}
	}
	left := textStyle(topoFont+1, draw.XLeft, draw.YCenter)
	for _, t := range d.RowLabels {
		c.FillText(left, t.At, t.Text)
	}
	for _, n := range d.Nodes {
		d.drawNode(c, n, small)
	}
	for _, p := range d.Ports {
		s := small
		s.Color = markColour
		if p.Hot {
			s.Color = dropColour
		}
		c.FillText(s, p.At, p.Text)
	}
	c.FillText(textStyle(topoFont+4, draw.XLeft, draw.YTop), vg.Point{X: topoMargin, Y: d.Height - topoMargin/2}, d.Title)
}

// LinkPath is the line a link is drawn along: straight between rows, and
// bowed up between two nodes of one row so it passes over those between.
func (d Diagram) LinkPath(l DiagramLink) []vg.Point {
	a, b := d.Nodes[l.A].At, d.Nodes[l.B].At
	if a.Y != b.Y {
		return []vg.Point{a, b}
	}
	const n = 16 // segments of the quadratic Bézier curve through the bow
	top := vg.Point{X: (a.X + b.X) / 2, Y: a.Y + 2*topoBend}
	path := make([]vg.Point, 0, n+1)
	for i := range n + 1 {
		t := vg.Length(i) / n
		path = append(path, vg.Point{
			X: (1-t)*(1-t)*a.X + 2*(1-t)*t*top.X + t*t*b.X,
			Y: (1-t)*(1-t)*a.Y + 2*(1-t)*t*top.Y + t*t*b.Y,
		})
	}
	return path
}

// drawNode draws a host as a circle and a switch as a box coloured by its
// row, with the name inside.
func (d Diagram) drawNode(c draw.Canvas, n DiagramNode, sty draw.TextStyle) {
	var shape []vg.Point
	var fill color.Color = hostColour
	if n.Host {
		for i := range 24 {
			a := 2 * math.Pi * float64(i) / 24
			shape = append(shape, vg.Point{X: n.At.X + hostR*vg.Length(math.Cos(a)), Y: n.At.Y + hostR*vg.Length(math.Sin(a))})
		}
	} else {
		fill = switchColour[n.Row%len(switchColour)]
		x0, x1, y0, y1 := n.At.X-switchW/2, n.At.X+switchW/2, n.At.Y-switchH/2, n.At.Y+switchH/2
		shape = []vg.Point{{X: x0, Y: y0}, {X: x1, Y: y0}, {X: x1, Y: y1}, {X: x0, Y: y1}}
	}
	c.FillPolygon(fill, shape)
	c.StrokeLines(draw.LineStyle{Color: color.Black, Width: vg.Points(0.6)}, append(shape, shape[0]))
	c.FillText(sty, n.At, n.Name)
}

func textStyle(size vg.Length, x text.XAlignment, y text.YAlignment) draw.TextStyle {
	return draw.TextStyle{Color: color.Black, Font: font.From(plot.DefaultFont, size), XAlign: x, YAlign: y, Handler: plot.DefaultTextHandler}
}
