// Package layers states the order in which fabric's packages may import
// each other, and its test holds the tree to it (`go list` over the
// module). Data flows one way through fabric — lab file → lab → ports and
// hosts → schedule → transports → records → results — and the imports
// follow from it: each package, and its tests, may import packages of its
// own layer or of a lower one, never of a higher one. A test that needs a
// higher package (a lab, an experiment) lives with the highest package it
// needs: emu's tests bring labs up for the transports and mechanisms
// below, experiments' tests run them in experiments.
//
//	0 vocabulary     internal/…, hosts/transport (the transport contract)
//	1 mechanisms     tc, tc/… (ports, pacer, delay lines), hosts/cc, hosts/workload
//	2 hosts          hosts (runtimes, processes), hosts/transport/… (tcp, homa, ndp, udp),
//	                 hosts/probe (the LMM probe), images
//	3 lab            emu: lab files, graphs, bring-up, the agent
//	4 analysis       results/…: captures, LMM, flows, statistics, plots, reports
//	5 experiments    experiments/…: schedules, runner, scenarios, paper tables
//	6 programs       cmd/fabric, examples/…, bench/…, scripts/… (lint checks)
//
// The lab (3) sits above the mechanisms and host runtimes because a lab
// file embeds their typed settings (port settings, pacer parameters,
// runtime names) and bring-up assembles them; none of them knows about
// topologies. Analysis (4) reads what transports and captures wrote and
// knows nothing of how an experiment ran; experiments (5) drive it.
package layers

import "strings"

// Module is fabric's module path.
const Module = "github.com/fabric-emu/fabric"

// order maps a package path (relative to Module) to its layer; a path
// also covers the packages beneath it, and the longest match wins.
var order = map[string]int{
	"internal":                0,
	"hosts/transport":         0,
	"tc":                      1,
	"hosts/cc":                1,
	"hosts/workload":          1,
	"hosts":                   2,
	"hosts/transport/tcp":     2,
	"hosts/transport/homa":    2,
	"hosts/transport/ndp":     2,
	"hosts/transport/udp":     2,
	"hosts/transport/builtin": 2,
	"images":                  2,
	"emu":                     3,
	"results":                 4,
	"experiments":             5,
	"cmd":                     6,
	"examples":                6,
	"bench":                   6,
	"scripts":                 6,
}

// Of returns the layer of a package path inside the module, and whether it
// has one.
func Of(pkg string) (int, bool) {
	rel, ok := strings.CutPrefix(pkg, Module+"/")
	if !ok {
		return 0, false
	}
	best, layer := -1, 0
	for path, l := range order {
		if (rel == path || strings.HasPrefix(rel, path+"/")) && len(path) > best {
			best, layer = len(path), l
		}
	}
	return layer, best >= 0
}
