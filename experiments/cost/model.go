package cost

import (
	"time"

	"github.com/fabric-emu/fabric/internal/cpustat"
)

// Window is what a trial does in one window of Load.Window: counts of
// the events the profile prices.
type Window struct {
	Messages float64 // messages that start
	// Woken is how many of their ends (sender and receiver) find their
	// host idle, counted in pairs: a message that wakes both counts 1.
	Woken       float64
	DataPackets float64 // the transport's data packets
	// SparsePackets are the data packets whose hosts had been idle since
	// their last packet (HostIdleGap): Transport.SparsePacketUS each.
	SparsePackets float64
	HopPackets    float64 // packets, data and answers, times the switches each crosses
	DelayPackets  float64 // packets times the delay lines each crosses
	DelayTurns    float64 // the delay loop's turns (DelayTurns)
	Captured      float64 // packets captured
	PacerTurns    float64 // turns of the pacers' rate controllers
}

// Load is a trial as the model sees it: its transport's costs and what
// it does window by window, from the schedule's start through its drain.
type Load struct {
	Transport Transport
	Window    time.Duration
	Windows   []Window
}

// Prediction is the model's answer for one trial, in percent of all the
// cores: the trial's own share (what the machine's CPU does for it, the
// lab at rest included), its mean and its highest window, and the share
// of windows in which that share and the steal leave less idle than the
// fidelity monitor's floor.
type Prediction struct {
	MeanPct      float64 `json:"mean_pct"`
	PeakPct      float64 `json:"peak_pct"`
	SaturatedPct float64 `json:"saturated_pct"`
	// LoopPeakPct is the delay loop's busiest window, in percent of its
	// one thread: near 100 it falls behind whatever the cores' idle.
	LoopPeakPct float64 `json:"loop_peak_pct,omitempty"`
	// Parts is MeanPct by what it pays for: the transports, the
	// switches' forwarding, the delay lines, the captures, the pacers,
	// and the lab at rest.
	Parts Parts `json:"parts"`
}

// Parts is a mean share of the cores by what it pays for, percent.
type Parts struct {
	Transports float64 `json:"transports"`
	Switches   float64 `json:"switches"`
	DelayLines float64 `json:"delay_lines"`
	Captures   float64 `json:"captures"`
	Pacers     float64 `json:"pacers"`
	Rest       float64 `json:"rest"`
}

// Saturated says whether the prediction breaks the fidelity monitor's
// CPU rule: idle below its floor in more than its share of the samples.
func (p Prediction) Saturated() bool { return p.SaturatedPct > 100*cpustat.SaturatedShare }

// Predict adds up the costs of a load on cpus cores.
//
// What the model leaves out, each a reason it can be wrong: the CPU is
// spent when packets are served at their ports (each message's packets
// reach its receiver's port at its sender's link rate and leave at the
// port's, one fluid queue per receiver, so contention elsewhere in the
// fabric and losses are not modelled); a packet costs the same whatever
// its size (costs are measured with 1500-byte packets); the transports'
// answers (ACKs, grants, pulls) are a fixed number per data packet; a
// transport at rest costs nothing; a pacer's turn costs what an idle
// one's does, though a busy bucket's reads more; and other processes on
// the machine are not predicted (their share, and steal, take from the
// idle the monitor sees).
func (c Costs) Predict(l Load, cpus int) Prediction {
	var p Prediction
	if len(l.Windows) == 0 || l.Window <= 0 || cpus < 1 {
		return p
	}
	capUS := float64(l.Window) / 1e3 * float64(cpus) // µs of CPU in a window
	saturated := 0
	for _, w := range l.Windows {
		pct := c.RestPct + 100*c.WindowUS(w, l.Transport)/capUS
		p.MeanPct += pct
		p.Parts.Transports += 100 * (w.Messages*l.Transport.MessageUS + w.Woken*l.Transport.WakeUS + l.Transport.packetsUS(w)) / capUS
		p.Parts.Switches += 100 * w.HopPackets * c.HopUS / capUS
		p.Parts.DelayLines += 100 * (w.DelayPackets*c.DelayPacketUS + w.DelayTurns*c.DelayTurnUS) / capUS
		p.Parts.Captures += 100 * w.Captured * c.CaptureUS / capUS
		p.Parts.Pacers += 100 * w.PacerTurns * c.PacerTurnUS / capUS
		p.PeakPct = max(p.PeakPct, pct)
		if 100-pct-c.StealPct < cpustat.SaturatedIdlePct {
			saturated++
		}
		loop := w.DelayPackets*(c.LoopPacketUS+c.VerdictUS) + w.DelayTurns*c.LoopTurnUS
		p.LoopPeakPct = max(p.LoopPeakPct, 100*loop/(float64(l.Window)/1e3))
	}
	k := float64(len(l.Windows))
	p.MeanPct /= k
	p.Parts = Parts{Transports: p.Parts.Transports / k, Switches: p.Parts.Switches / k, DelayLines: p.Parts.DelayLines / k,
		Captures: p.Parts.Captures / k, Pacers: p.Parts.Pacers / k, Rest: c.RestPct}
	p.SaturatedPct = 100 * float64(saturated) / float64(len(l.Windows))
	return p
}

// WindowUS is what one window's events cost, µs of CPU, the lab at rest
// aside.
func (c Costs) WindowUS(w Window, t Transport) float64 {
	return w.Messages*t.MessageUS + w.Woken*t.WakeUS + t.packetsUS(w) + w.HopPackets*c.HopUS +
		w.DelayPackets*c.DelayPacketUS + w.DelayTurns*c.DelayTurnUS + w.Captured*c.CaptureUS + w.PacerTurns*c.PacerTurnUS
}

// LoopPacketCost is what one packet costs the delay loop's thread when
// packets are far enough apart that each wakes it: its own work, its
// verdict's forwarding and a wake-up, µs.
func (c Costs) LoopPacketCost() float64 { return c.LoopPacketUS + c.VerdictUS + c.LoopTurnUS }
