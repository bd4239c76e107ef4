package emu

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"

	"github.com/fabric-emu/fabric/internal/netnsutil"
	"github.com/fabric-emu/fabric/tc/pacer"
)

// PacedHosts are the hosts of g whose pacer the lab file turns on.
func (s *Spec) PacedHosts(g *Graph) []string {
	var out []string
	for _, h := range g.Hosts() {
		if _, on := s.PacerConfig(h); on {
			out = append(out, h.Name)
		}
	}
	return out
}

// StartPacers puts a pacer on the NIC of each host with the parameters the
// lab file gives it (PacerConfig; on or off there), run by this process
// until StopPacers or Down. On error the pacers it started are stopped.
func (l *Lab) StartPacers(ctx context.Context, hosts []string) error {
	if len(hosts) == 0 {
		return nil
	}
	ctx = context.WithoutCancel(ctx) // the pacers outlive the call
	started := map[string]*pacer.Pacer{}
	fail := func(err error) error {
		for _, p := range started {
			p.Stop()
		}
		return err
	}
	for _, h := range hosts {
		n := l.Graph.Node(h)
		if n == nil || n.Kind != HostNode || len(n.Ifaces) == 0 {
			return fail(fmt.Errorf("lab %s: no host %q to pace", l.Name, h))
		}
		l.mu.Lock()
		dup := l.pacers[h] != nil
		l.mu.Unlock()
		if dup || started[h] != nil {
			return fail(fmt.Errorf("lab %s: host %s already has a pacer", l.Name, h))
		}
		cfg, _ := l.Spec.PacerConfig(n)
		p, err := pacer.Start(ctx, netnsutil.Path(l.Name, h), n.Ifaces[0].Name, cfg)
		if err != nil {
			return fail(fmt.Errorf("lab %s: host %s: %w", l.Name, h, err))
		}
		started[h] = p
	}
	l.mu.Lock()
	if l.pacers == nil {
		l.pacers = map[string]*pacer.Pacer{}
	}
	for h, p := range started {
		l.pacers[h] = p
	}
	l.mu.Unlock()
	if err := l.writeAgentFile(); err != nil {
		return fail(errors.Join(err, l.StopPacers()))
	}
	return nil
}

// Pacers are the lab's pacers that this handle runs, by host.
func (l *Lab) Pacers() map[string]*pacer.Pacer {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.pacers)
}

// StopPacers stops the pacers this handle runs and removes them from the
// hosts' NICs; the lab stays up.
func (l *Lab) StopPacers() error {
	l.mu.Lock()
	ps := l.pacers
	l.pacers = nil
	l.mu.Unlock()
	if len(ps) == 0 {
		return nil
	}
	var errs []error
	for _, p := range ps {
		errs = append(errs, p.Stop())
	}
	if h, _ := ReadAgent(l.Name); h != nil && h.PID == os.Getpid() {
		errs = append(errs, l.writeAgentFile())
	}
	return errors.Join(errs...)
}
