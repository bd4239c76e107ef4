// Package tc gives every port of a lab a datacenter switch queue: an HTB
// root at the port rate, priority or weighted bands, bfifo buffers, DSCP
// classification, and eBPF ECN marking (DCTCP threshold, HULL phantom
// queue). See DESIGN.md "Mechanisms, precisely".
package tc

import (
	"time"

	"fabric/internal/units"
)

// PortSpec is one layer of port settings as written in a lab file. Every
// field is optional so that layers (defaults, tier, one port) can be merged;
// Resolve validates the merged result into a Port.
type PortSpec struct {
	Rate    *units.Rate    `yaml:"rate,omitempty" json:"rate,omitempty"`
	Buffer  *Buffer        `yaml:"buffer,omitempty" json:"buffer,omitempty"`
	Queues  *QueuesSpec    `yaml:"queues,omitempty" json:"queues,omitempty"`
	Marking *MarkingSpec   `yaml:"marking,omitempty" json:"marking,omitempty"`
	Delay   *time.Duration `yaml:"delay,omitempty" json:"delay,omitempty"`
}

// Buffer is a drop-tail limit in bytes ("700KB") or packets ("100pkts").
type Buffer struct {
	Bytes   units.Size `json:"bytes,omitempty"`
	Packets int        `json:"packets,omitempty"`
}

// QueuesSpec selects strict-priority bands or weighted classes.
type QueuesSpec struct {
	Bands    int    `yaml:"bands,omitempty" json:"bands,omitempty"`
	Classify string `yaml:"classify,omitempty" json:"classify,omitempty"`
	Weights  []int  `yaml:"weights,omitempty" json:"weights,omitempty"`
}

// MarkingSpec chooses at most one ECN marker.
type MarkingSpec struct {
	ECN     *ECNSpec     `yaml:"ecn,omitempty" json:"ecn,omitempty"`
	Phantom *PhantomSpec `yaml:"phantom,omitempty" json:"phantom,omitempty"`
}

// ECNSpec is DCTCP-style threshold marking: CE when the queue is ≥ K.
type ECNSpec struct {
	Threshold units.Size `yaml:"threshold" json:"threshold"`
}

// PhantomSpec is HULL's phantom queue (§2.1): a counter drained at
// Drain×rate that marks CE above Threshold.
type PhantomSpec struct {
	Drain     float64    `yaml:"drain" json:"drain"`
	Threshold units.Size `yaml:"threshold" json:"threshold"`
}

// PortsSpec is the `ports:` section of a lab file: defaults for every
// switch egress port, overridden per tier and then per port ("s0:eth1").
type PortsSpec struct {
	PortSpec  `yaml:",inline"`
	Tiers     map[string]PortSpec `yaml:"tiers,omitempty" json:"tiers,omitempty"`
	Overrides map[string]PortSpec `yaml:"overrides,omitempty" json:"overrides,omitempty"`
}
