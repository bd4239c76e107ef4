package experiments

import (
	"encoding/json"
	"os"
	"time"

	"github.com/fabric-emu/fabric/experiments/cost"
	"github.com/fabric-emu/fabric/internal/machine"
	"github.com/fabric-emu/fabric/results/report"
)

// thisMachine is the machine trials run on here, as meta.json records it:
// its host name, what it is, its kernel and the calibrated profile that
// stands for it (the run's own, else the state directory's when it is
// not stale; none when no profile stands).
func thisMachine(profile *cost.Profile) *report.Machine {
	name, _ := os.Hostname()
	n := &report.Machine{Name: name, Machine: machine.Read(), Kernel: kernelRelease()}
	if profile == nil {
		profile = standingProfile()
	}
	if profile != nil {
		n.Profile, _ = json.Marshal(profile)
	}
	return n
}

// standingProfile is the state directory's machine profile when it
// stands for this machine and build, else nil: a trial records it and
// never measures one.
func standingProfile() *cost.Profile {
	p, err := cost.Read(cost.Path())
	if err != nil || p.Stale(time.Now(), cost.Here(BuildVersion().String())) != "" {
		return nil
	}
	return p
}
