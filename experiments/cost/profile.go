// Package cost is what this machine's CPU pays for what a trial does —
// a packet through a switch, a delay line's packet and wake-up, a
// captured packet, a pacer's turn, a transport's message and packet —
// measured once by `fabric doctor --calibrate` into a machine profile,
// and the model that adds them up over a trial's schedule to predict its
// share of the cores before it runs.
package cost

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fabric-emu/fabric/internal/cpustat"
	"github.com/fabric-emu/fabric/internal/dirs"
	"github.com/fabric-emu/fabric/internal/machine"
	"github.com/fabric-emu/fabric/internal/yamlfile"
)

// Profile is one machine's measured costs, with what identifies the
// machine and the build that measured them: a profile stands for the
// machine only while all of these still hold and it is younger than
// MaxAge (Stale).
type Profile struct {
	Kernel   string    `json:"kernel" yaml:"kernel"`
	CPUModel string    `json:"cpu_model" yaml:"cpu_model"`
	CPUs     int       `json:"cpus" yaml:"cpus"`
	Fabric   string    `json:"fabric" yaml:"fabric"`
	Date     time.Time `json:"date" yaml:"date"`
	// TookS is how long the calibration took, seconds.
	TookS float64 `json:"took_s" yaml:"took_s"`
	Costs Costs   `json:"costs" yaml:"costs"`

	doc *yamlfile.Doc // the file it was read from, for file:line errors
}

// Costs are CPU times of one core, in µs, unless a name says otherwise.
// Every one is the machine's whole cost (its busy time less what other
// processes used), so that they add up to the share of the cores the
// fidelity monitor sees.
type Costs struct {
	// HopUS is one packet through one switch: its forwarding and its
	// egress port (HTB and the eBPF marker).
	HopUS float64 `json:"hop_us" yaml:"hop_us"`
	// DelayPacketUS is one packet through one delay line besides its
	// share of a turn: the kernel queueing it to the loop, the loop's
	// work on it and the verdict that forwards it on. LoopPacketUS and
	// VerdictUS are the parts on the loop's thread.
	DelayPacketUS float64 `json:"delay_packet_us" yaml:"delay_packet_us"`
	LoopPacketUS  float64 `json:"loop_packet_us" yaml:"loop_packet_us"`
	VerdictUS     float64 `json:"verdict_us" yaml:"verdict_us"`
	// DelayTurnUS is one turn of the delay loop (a wake-up, or a spin to a
	// release too near for its timer), the CPU its released packets are
	// steered to woken too; LoopTurnUS is the part on the loop's thread.
	DelayTurnUS float64 `json:"delay_turn_us" yaml:"delay_turn_us"`
	LoopTurnUS  float64 `json:"loop_turn_us" yaml:"loop_turn_us"`
	// CaptureUS is one captured packet: the kernel's copy into the ring
	// and the capture's loop writing it out.
	CaptureUS float64 `json:"capture_us" yaml:"capture_us"`
	// PacerTurnUS is one turn of a pacer's rate controller.
	PacerTurnUS float64 `json:"pacer_turn_us" yaml:"pacer_turn_us"`
	// RestPct is the share of the machine a lab and fabric take with no
	// traffic, in percent of all the cores.
	RestPct float64 `json:"rest_pct" yaml:"rest_pct"`
	// Transports are fabric's own transports' costs, by name.
	Transports map[string]Transport `json:"transports" yaml:"transports"`
	// Lateness is how late an idle delay loop's release comes after
	// sleeps of 50 µs to 10 ms.
	Lateness []Lateness `json:"timer_lateness" yaml:"timer_lateness"`
	// StealPct is the share of the cores the hypervisor took while the
	// calibration ran.
	StealPct float64 `json:"steal_pct" yaml:"steal_pct"`
	// Trial is the wall-clock time a trial takes beyond its traffic.
	Trial TrialTime `json:"trial_time" yaml:"trial_time"`
}

// Transport is one transport's cost: MessageUS per message and PacketUS
// per data packet, both ends and the packets that answer it (ACKs,
// grants, pulls) at the hosts, the switches on the path excluded; WakeUS
// more per message whose two ends were idle (HostIdleGap) and had to be
// woken, as a sparse sender's and receiver's are. The Process figures
// are the parts the transports' processes used themselves (the
// accounting's transports), the rest being the kernel's work on their
// packets outside them.
//
// SparsePacketUS replaces PacketUS for a data packet whose hosts see
// their packets more than HostIdleGap apart, so that each packet and its
// answer wake them: a long flow on a link scaled down far enough (NDP's
// 9 KB packets at 20 Mbit/s come 3.6 ms apart): PacketUS plus what the
// processes spend more on such a packet. Zero means unmeasured, and
// PacketUS is used.
type Transport struct {
	MessageUS             float64 `json:"message_us" yaml:"message_us"`
	PacketUS              float64 `json:"packet_us" yaml:"packet_us"`
	SparsePacketUS        float64 `json:"sparse_packet_us,omitempty" yaml:"sparse_packet_us,omitempty"`
	WakeUS                float64 `json:"wake_us" yaml:"wake_us"`
	ProcessMessageUS      float64 `json:"process_message_us" yaml:"process_message_us"`
	ProcessPacketUS       float64 `json:"process_packet_us" yaml:"process_packet_us"`
	ProcessSparsePacketUS float64 `json:"process_sparse_packet_us,omitempty" yaml:"process_sparse_packet_us,omitempty"`
	ProcessWakeUS         float64 `json:"process_wake_us" yaml:"process_wake_us"`
}

// packetsUS is what a window's data packets cost the transport, µs.
func (t Transport) packetsUS(w Window) float64 {
	sparse := t.PacketUS
	if t.SparsePacketUS > 0 {
		sparse = t.SparsePacketUS
	}
	return (w.DataPackets-w.SparsePackets)*t.PacketUS + w.SparsePackets*sparse
}

// HostIdleGap is how long a host's transport must have had nothing to do
// for a message to find it idle: its runtime has parked its threads and
// the virtual CPU may have halted, and waking them costs traps and
// context switches that a busy transport does not pay. Go parks an idle
// thread after spinning for some microseconds; a millisecond is well past
// that.
const HostIdleGap = time.Millisecond

// Lateness is an idle delay loop's release lateness after a sleep.
type Lateness struct {
	SleepUS float64 `json:"sleep_us" yaml:"sleep_us"`
	P50US   float64 `json:"p50_us" yaml:"p50_us"`
	P99US   float64 `json:"p99_us" yaml:"p99_us"`
}

// TrialTime is a trial's wall-clock time beyond its traffic and drain:
// FixedS for every trial (transports' start, the idle RTTs, collecting)
// and NodeS per node of its lab (building and removing it).
type TrialTime struct {
	FixedS float64 `json:"fixed_s" yaml:"fixed_s"`
	NodeS  float64 `json:"node_s" yaml:"node_s"`
}

// Seconds is a trial's overhead on a lab of nodes nodes.
func (t TrialTime) Seconds(nodes int) float64 { return t.FixedS + t.NodeS*float64(nodes) }

// LateP99 is the idle loop's p99 lateness after a sleep of d, µs:
// interpolated between the sleeps measured, the nearest one's beyond
// them.
func (c Costs) LateP99(d time.Duration) float64 {
	us := float64(d) / 1e3
	l := c.Lateness
	if len(l) == 0 {
		return 0
	}
	if us <= l[0].SleepUS {
		return l[0].P99US
	}
	for i := 1; i < len(l); i++ {
		if us <= l[i].SleepUS {
			f := (us - l[i-1].SleepUS) / (l[i].SleepUS - l[i-1].SleepUS)
			return l[i-1].P99US + f*(l[i].P99US-l[i-1].P99US)
		}
	}
	return l[len(l)-1].P99US
}

// MaxAge is how long a profile stands for its machine: the host under a
// virtual machine, and so its steal and timers, change from day to day.
const MaxAge = 24 * time.Hour

// Identity is what a profile must share with the machine it stands for.
type Identity struct {
	Kernel   string
	CPUModel string
	CPUs     int
	Fabric   string // the build: its version and commit
}

// Here is this machine's identity, running the build fabric.
func Here(fabric string) Identity {
	m := machine.Read()
	var u unix.Utsname
	kernel := ""
	if unix.Uname(&u) == nil {
		kernel = unix.ByteSliceToString(u.Release[:])
	}
	return Identity{Kernel: kernel, CPUModel: m.Model, CPUs: m.CPUs, Fabric: fabric}
}

// Identity is the identity the profile was measured with.
func (p *Profile) Identity() Identity {
	return Identity{Kernel: p.Kernel, CPUModel: p.CPUModel, CPUs: p.CPUs, Fabric: p.Fabric}
}

// Stale says why p cannot stand for the machine here at now, "" when it
// can: measured more than MaxAge ago, on another kernel, CPU or build of
// fabric, or while the hypervisor took a notable share of the CPU.
func (p *Profile) Stale(now time.Time, here Identity) string {
	if field, msg := p.otherMachine(here); field != "" {
		return msg
	}
	if p.Fabric != here.Fabric {
		return fmt.Sprintf("measured by fabric %s, this is %s", p.Fabric, here.Fabric)
	}
	if age := now.Sub(p.Date); age > MaxAge || age < 0 {
		return fmt.Sprintf("measured %s ago (%s), more than %s", age.Round(time.Minute), p.Date.Format(time.RFC3339), MaxAge)
	}
	if p.Costs.StealPct >= cpustat.NotableStealPct {
		return fmt.Sprintf("measured while the hypervisor took %.1f %% of the CPU, which slows what is measured", p.Costs.StealPct)
	}
	return ""
}

// otherMachine names the first field that says p was measured on another
// machine than here, and why.
func (p *Profile) otherMachine(here Identity) (field, msg string) {
	switch {
	case p.Kernel != here.Kernel:
		return "kernel", fmt.Sprintf("measured on kernel %s, this machine runs %s", p.Kernel, here.Kernel)
	case p.CPUModel != here.CPUModel:
		return "cpu_model", fmt.Sprintf("measured on a %q, this machine is a %q", p.CPUModel, here.CPUModel)
	case p.CPUs != here.CPUs:
		return "cpus", fmt.Sprintf("measured with %d CPUs, this machine has %d", p.CPUs, here.CPUs)
	}
	return "", ""
}

// CheckMachine is for a profile the user names: one from another machine
// (kernel, CPU model, core count) is bad input, with its file and line.
func (p *Profile) CheckMachine(here Identity) error {
	if field, msg := p.otherMachine(here); field != "" {
		return p.doc.Errorf(field, "a profile from another machine: %s; `fabric doctor --calibrate` measures this one", msg)
	}
	return nil
}

// FileName is the profile's name in fabric's state directory.
const FileName = "machine.json"

// Path is where this machine's profile is kept.
func Path() string { return filepath.Join(dirs.State(), FileName) }

// Read reads a profile; every error about its content is a file:line
// *yamlfile.Error (JSON is read as the YAML it also is, for the lines).
func Read(file string) (*Profile, error) {
	var p Profile
	doc, err := yamlfile.Load(file, &p)
	if err != nil {
		return nil, err
	}
	p.doc = doc
	switch {
	case p.CPUs < 1:
		return nil, doc.Errorf("cpus", "want the machine's core count, got %d", p.CPUs)
	case p.Date.IsZero():
		return nil, doc.Errorf("date", "is required: when the profile was measured")
	case p.Costs.HopUS <= 0:
		return nil, doc.Errorf("costs.hop_us", "want a measured cost above 0, got %g", p.Costs.HopUS)
	}
	return &p, nil
}

// Write writes the profile to file, through a temporary file so that a
// reader never sees half of it.
func (p *Profile) Write(file string) error {
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, file)
}

// String names the profile in one line: "measured 2026-… on 2 CPUs (…),
// kernel …, fabric …".
func (p *Profile) String() string {
	return fmt.Sprintf("measured %s on %d CPUs (%s), kernel %s, fabric %s", p.Date.Format(time.RFC3339), p.CPUs,
		strings.TrimSpace(p.CPUModel), p.Kernel, p.Fabric)
}

// DelayTurns is how many turns the delay loop takes to release n packets
// of one line whose packets leave at least frame apart (a full frame's
// time on its link): a turn releases every packet due within early
// (delay.BatchTolerance) of the first, so a burst's packets share turns
// when frames are shorter than early, and packets further apart take one
// each. Each turn costs a wake-up or a spin of about the same CPU (the
// loop spins to a release due sooner than its timer can be trusted,
// tc/delay). Packets of different lines are taken not to share turns.
func DelayTurns(n float64, frame, early time.Duration) float64 {
	if n <= 0 {
		return 0
	}
	return n / (1 + float64(early)/float64(max(frame, 1)))
}
