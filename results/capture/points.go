package capture

import (
	"context"
	"fmt"
	"strings"
)

// ParsePoint parses a capture point written NODE:IFNAME or
// NODE:IFNAME:DIRECTION ("s0:eth1", "s0:eth5:out"), as in
// `fabric capture LAB s0:eth1 s0:eth5:out -w DIR`. nsPath maps a node name
// to its namespace path; the lab package provides it
// (netnsutil.Path(lab, node)), so capture does not depend on the lab's
// naming scheme.
func ParsePoint(spec string, nsPath func(node string) string) (Point, Direction, error) {
	parts := strings.Split(spec, ":")
	if len(parts) < 2 || len(parts) > 3 || parts[0] == "" || parts[1] == "" {
		return Point{}, Both, fmt.Errorf("capture point %q: want NODE:IFNAME[:in|out]", spec)
	}
	dir := Both
	if len(parts) == 3 {
		d, err := ParseDirection(parts[2])
		if err != nil {
			return Point{}, Both, fmt.Errorf("capture point %q: %w", spec, err)
		}
		dir = d
	}
	return Point{NetNS: nsPath(parts[0]), Ifname: parts[1], Label: parts[0] + ":" + parts[1]}, dir, nil
}

// StartPoints is the body of `fabric capture`: it parses every spec and
// starts one capture per point into dir, each with its own direction and
// the shared snap length and filter otherwise.
func StartPoints(ctx context.Context, specs []string, nsPath func(node string) string, dir string, opts Options) (*Group, error) {
	g := &Group{}
	for _, spec := range specs {
		p, d, err := ParsePoint(spec, nsPath)
		if err != nil {
			g.Stop()
			return nil, err
		}
		o := opts
		o.Filter.Direction = d
		s, err := Start(ctx, p, dir, o)
		if err != nil {
			g.Stop()
			return nil, err
		}
		g.sessions = append(g.sessions, s)
	}
	return g, nil
}
