package tc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fabric-emu/fabric/internal/netnsutil"

	"github.com/cilium/ebpf"
	bpflink "github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/fabric-emu/fabric/internal/dirs"
)

// BPFRoot holds one directory per lab with the lab's pinned port maps, so
// that `fabric port set` and `fabric status --ports` in another process
// find the parameters and counters of a running lab.
const BPFRoot = "/sys/fs/bpf/fabric"

// Values of port_cfg.marker and port_key.dir (tc/bpf/port.bpf.c).
const (
	markNone    = 0
	markECN     = 1
	markPhantom = 2
	markDepart  = 3
	markNDP     = 4

	dirEgress = 0
	dirPeer   = 1
)

// filterPrio is the tc filter priority of fabric's port programs on
// clsact. Other users of the same hooks (the host pacer) take other
// priorities, so Apply never replaces their filters.
const filterPrio = 0x100

var loaded = struct {
	sync.Mutex
	labs map[string]*portObjects
}{labs: map[string]*portObjects{}}

// labObjects loads the port programs once per lab and process. The maps
// are pinned by name under BPFRoot/<lab>, so a later process (or a second
// load after a crash) shares them; every port of the lab attaches the same
// two programs by file descriptor and differs only by its map key.
func labObjects(lab string) (*portObjects, error) {
	loaded.Lock()
	defer loaded.Unlock()
	if o := loaded.labs[lab]; o != nil {
		return o, nil
	}
	dir, err := labPinDir(lab, true)
	if err != nil {
		return nil, err
	}
	var o portObjects
	if err := loadPortObjects(&o, &ebpf.CollectionOptions{Maps: ebpf.MapOptions{PinPath: dir}}); err != nil {
		return nil, fmt.Errorf("load port programs for lab %s: %w", lab, err)
	}
	loaded.labs[lab] = &o
	return &o, nil
}

func labPinDir(lab string, create bool) (string, error) {
	if lab == "" || strings.ContainsAny(lab, "/.") {
		return "", fmt.Errorf("lab name %q cannot name a pin directory", lab)
	}
	dir := filepath.Join(BPFRoot, lab)
	if !create {
		return dir, nil
	}
	if err := ensureBPFFS(); err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("pin directory: %w", err)
	}
	return dir, nil
}

// ensureBPFFS mounts the BPF filesystem at /sys/fs/bpf when nothing is
// mounted there yet (minimal hosts and CI containers).
func ensureBPFFS() error {
	const mnt = "/sys/fs/bpf"
	var st unix.Statfs_t
	if err := unix.Statfs(mnt, &st); err == nil && st.Type == unix.BPF_FS_MAGIC {
		return nil
	}
	if err := unix.Mount("bpf", mnt, "bpf", 0, "mode=0700"); err != nil && !errors.Is(err, unix.EBUSY) {
		return fmt.Errorf("mount bpffs at %s: %w", mnt, err)
	}
	return nil
}

// labMaps opens the pinned maps of a running lab (from any process).
type labMaps struct{ cfg, state *ebpf.Map }

func openLabMaps(lab string) (*labMaps, error) {
	loaded.Lock()
	o := loaded.labs[lab]
	loaded.Unlock()
	if o != nil {
		return &labMaps{o.PortCfgs, o.PortStates}, nil
	}
	dir, err := labPinDir(lab, false)
	if err != nil {
		return nil, err
	}
	cfg, err := ebpf.LoadPinnedMap(filepath.Join(dir, "port_cfgs"), nil)
	if err != nil {
		return nil, fmt.Errorf("lab %s has no port programs loaded (%w)", lab, err)
	}
	state, err := ebpf.LoadPinnedMap(filepath.Join(dir, "port_states"), nil)
	if err != nil {
		cfg.Close()
		return nil, fmt.Errorf("lab %s: %w", lab, err)
	}
	return &labMaps{cfg, state}, nil
}

// close releases maps opened from pins (not the process's loaded ones).
func (m *labMaps) close(lab string) {
	loaded.Lock()
	defer loaded.Unlock()
	if loaded.labs[lab] != nil {
		return
	}
	m.cfg.Close()
	m.state.Close()
}

// portKey names a port hook for the programs.
func portKey(c *nsConn, ifindex int, dir uint32) (portPortKey, error) {
	cookie, err := c.cookie()
	return portPortKey{NetnsCookie: cookie, Ifindex: uint32(ifindex), Dir: dir}, err
}

func applyPrograms(ctx context.Context, c *nsConn, link netlink.Link, t Target, p Port) error {
	if !p.NeedsPrograms() {
		return forgetPort(ctx, c, link, t)
	}
	o, err := labObjects(t.Lab)
	if err != nil {
		return err
	}
	ifindex := link.Attrs().Index
	key, err := portKey(c, ifindex, dirEgress)
	if err != nil {
		return err
	}
	cfg := p.programCfg()
	if p.needsProgram() {
		if err := attach(c, ifindex, netlink.HANDLE_MIN_EGRESS, o.PortEgress); err != nil {
			return err
		}
	}
	if cfg.Marker != markNone {
		if err := watchTracepoint(t.Lab, xmitPin, o.PortXmit); err != nil {
			return fmt.Errorf("departure counter: %w", err)
		}
	}
	if cfg.DropsSeen != 0 {
		if err := watchTracepoint(t.Lab, "drop_link", o.PortDrop); err != nil {
			return fmt.Errorf("drop counter: %w", err)
		}
	}
	if p.Phantom != nil || cfg.Marker == markECN || cfg.Marker == markNDP {
		if err := applyPeer(o, t, key, cfg); err != nil {
			return err
		}
	}
	return setPort(o, key, cfg)
}

// programCfg is what the port programs need to know about p.
func (p Port) programCfg() portPortCfg {
	cfg := portPortCfg{BandOf: p.BandOf, Buckets: uint32(p.Buckets)}
	if p.Bands > 1 {
		cfg.Bands = uint32(p.Bands)
	}
	switch {
	case p.NDP != nil:
		cfg.Marker = markNDP
		cfg.StaleNs = p.staleAfter(2 * time.Millisecond)
		p.ndpCaps(&cfg)
	case p.ECN != nil:
		cfg.Marker = markECN
		cfg.DrainBps = uint64(p.Rate.BytesPerSecond())
		cfg.Threshold = uint32(p.ECN.Threshold)
		cfg.StaleNs = p.staleAfter(ecnStaleSlack)
		if p.Buckets > 0 {
			// A bucket overflows while its band has room: drops cannot be
			// predicted from the band's count, so port_drop sees them.
			cfg.DropsSeen = 1
			break
		}
		for b := range p.Bands {
			cfg.CapBytes[b] = p.markerCap()
		}
	case p.Phantom != nil:
		cfg.Marker = markPhantom
		cfg.DrainBps = uint64(p.Rate.BytesPerSecond() * p.Phantom.Drain)
		cfg.WireBps = uint64(p.Rate.BytesPerSecond())
		cfg.Threshold = uint32(p.Phantom.Threshold)
	}
	return cfg
}

// applyPeer attaches port_peer at the far end of the link: the phantom
// queue's marks are set where the packets arrive, and counted ports (ECN,
// NDP) learn there the departures port_xmit missed.
func applyPeer(o *portObjects, t Target, key portPortKey, cfg portPortCfg) error {
	if t.PeerNetNS == "" || t.PeerIfname == "" {
		return fmt.Errorf("marking and NDP need the peer end of the link (Target.PeerNetNS/PeerIfname)")
	}
	pc, peer, err := openPort(t.peer())
	if err != nil {
		return err
	}
	defer pc.Close()
	if err := attach(pc, peer.Attrs().Index, netlink.HANDLE_MIN_INGRESS, o.PortPeer); err != nil {
		return err
	}
	if cfg.Marker == markPhantom {
		return nil
	}
	peerKey, err := portKey(pc, peer.Attrs().Index, dirPeer)
	if err != nil {
		return err
	}
	pcfg := portPortCfg{Marker: markDepart, Bands: cfg.Bands, BandOf: cfg.BandOf, Owner: key}
	if cfg.Marker == markNDP {
		pcfg.OwnerNdp = 1
	}
	if err := o.PortCfgs.Update(&peerKey, &pcfg, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("peer parameters: %w", err)
	}
	return nil
}

// xmitPin names the pinned link of the lab's port_xmit.
const xmitPin = "xmit_link"

// XmitMisses is how often the lab's port_xmit did not run when its
// tracepoint fired (the kernel's recursion misses of the program): each is
// a departure that no counted port and no phantom queue of the lab saw, or
// one of another device's, since the program fires for every device on
// the machine. 0 when the lab has no such program.
func XmitMisses(lab string) (uint64, error) {
	dir, err := labPinDir(lab, false)
	if err != nil {
		return 0, err
	}
	l, err := bpflink.LoadPinnedLink(filepath.Join(dir, xmitPin), nil)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("departure counter: %w", err)
	}
	defer l.Close()
	info, err := l.Info()
	if err != nil {
		return 0, fmt.Errorf("departure counter: %w", err)
	}
	prog, err := ebpf.NewProgramFromID(info.Program)
	if err != nil {
		return 0, fmt.Errorf("departure counter: %w", err)
	}
	defer prog.Close()
	st, err := prog.Stats()
	if err != nil {
		return 0, fmt.Errorf("departure counter: %w", err)
	}
	return st.RecursionMisses, nil
}

// watchTracepoint attaches a tracing program (port_xmit at
// net_dev_start_xmit: departures and phantom queues; port_drop at
// kfree_skb: qdisc drops of fair ECN ports) once per lab. The link is
// pinned next to the maps as name, so it outlives the process that built
// the lab (as the tc filters do) and a later process finds it instead of
// attaching twice; ForgetLab's unpinning detaches it.
func watchTracepoint(lab, name string, prog *ebpf.Program) error {
	loaded.Lock()
	defer loaded.Unlock()
	dir, err := labPinDir(lab, true)
	if err != nil {
		return err
	}
	pin := filepath.Join(dir, name)
	if l, err := bpflink.LoadPinnedLink(pin, nil); err == nil {
		return l.Close() // closing our fd leaves the pinned link attached
	}
	l, err := bpflink.AttachTracing(bpflink.TracingOptions{Program: prog})
	if err != nil {
		return fmt.Errorf("attach: %w", err)
	}
	defer l.Close()
	if err := l.Pin(pin); err != nil {
		return fmt.Errorf("pin: %w", err)
	}
	return nil
}

// markerCap is the fifo limit the ECN marker predicts drops with: the
// buffer less four frames (two CPUs, each with a packet between the egress
// hook and the qdisc, twice over), see ecn_enqueue.
func (p Port) markerCap() uint32 {
	frame := uint32(p.MTU + frameOverhead)
	return max(frame, uint32(p.BufferBytes())-min(4*frame, uint32(p.BufferBytes())))
}

// staleAfter is how long a port with a queue can send nothing: HTB sends a
// frame every frame time, so a port that still "has a queue" a few frame
// times and slack later counted in a packet its fifo dropped and is
// really empty.
func (p Port) staleAfter(slack time.Duration) uint64 {
	frame := float64(p.MTU+frameOverhead) / p.Rate.BytesPerSecond()
	return uint64(4*frame*1e9) + uint64(slack)
}

// ecnStaleSlack is longer than the machine's stalls, in which nothing is
// sent or received anywhere: after one, the first arrival finds the port
// silent for as long, and a reset then drops the whole queue from the
// count for good, so the queue sits that much above K. Stalls here reach
// tens of milliseconds (21.6 ms in a validate/dctcp trial, whose queue
// stepped up by 18 packets at it). A count kept high by a mispredicted
// drop waits this long at an idle port to be cleared, and marks nothing
// meanwhile unless it reaches K. NDP keeps 2 ms: a false reset there
// overfills the fifo, whose drops were counted in and so even it out.
const ecnStaleSlack = 200 * time.Millisecond

// attach adds clsact (if missing) and points fabric's filter on hook
// (ingress or egress) at prog.
func attach(c *nsConn, ifindex int, hook uint32, prog *ebpf.Program) error {
	clsact := &netlink.Clsact{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: ifindex, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT}}
	if err := c.h.QdiscAdd(clsact); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("clsact: %w", err)
	}
	if err := c.h.FilterReplace(portFilter(ifindex, hook, prog.FD())); err != nil {
		return fmt.Errorf("attach %s: %w", prog, err)
	}
	return nil
}

// detach removes fabric's filter from hook, if it is there.
func detach(c *nsConn, ifindex int, hook uint32) error {
	err := c.h.FilterDel(portFilter(ifindex, hook, 0))
	if err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("detach port program: %w", err)
	}
	return nil
}

// portFilter is fabric's port filter on hook, running the program fd.
func portFilter(ifindex int, hook uint32, fd int) *netlink.BpfFilter {
	return &netlink.BpfFilter{
		FilterAttrs: netlink.FilterAttrs{
			LinkIndex: ifindex, Parent: hook, Handle: 1,
			Priority: filterPrio, Protocol: unix.ETH_P_ALL,
		},
		Fd: fd, Name: "fabric_port", DirectAction: true,
	}
}

// setPort writes a hook's parameters and resets its counters.
func setPort(o *portObjects, key portPortKey, cfg portPortCfg) error {
	if err := o.PortStates.Update(&key, &portPortState{}, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("port state: %w", err)
	}
	if err := o.PortCfgs.Update(&key, &cfg, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("port parameters: %w", err)
	}
	return nil
}

// forgetPort makes t a plain port again when it is re-applied without
// programs: its entries in the lab's maps go, and so do the filters
// attached for it on its egress and its peer's ingress, whichever process
// attached them (the maps are pinned; filters belong to the kernel).
func forgetPort(_ context.Context, c *nsConn, link netlink.Link, t Target) error {
	maps, err := openLabMaps(t.Lab)
	if err != nil {
		return nil // the lab has no port programs: nothing to forget
	}
	defer maps.close(t.Lab)
	key, err := portKey(c, link.Attrs().Index, dirEgress)
	if err != nil {
		return err
	}
	if err := maps.cfg.Delete(&key); errors.Is(err, ebpf.ErrKeyNotExist) {
		return nil // never programmed (every plain port of a new lab)
	} else if err != nil {
		return err
	}
	if err := maps.state.Delete(&key); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return err
	}
	if err := detach(c, link.Attrs().Index, netlink.HANDLE_MIN_EGRESS); err != nil {
		return err
	}
	if t.PeerNetNS == "" || t.PeerIfname == "" {
		return nil
	}
	pc, peer, err := openPort(t.peer())
	if err != nil {
		return err
	}
	defer pc.Close()
	peerKey, err := portKey(pc, peer.Attrs().Index, dirPeer)
	if err != nil {
		return err
	}
	if err := maps.cfg.Delete(&peerKey); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return err
	}
	return detach(pc, peer.Attrs().Index, netlink.HANDLE_MIN_INGRESS)
}

// ForgetLab removes what a lab left outside its namespaces: the pinned
// port maps under BPFRoot/<lab> and this process's loaded programs
// (attached programs die with their namespaces). It succeeds when nothing
// exists. ForgetLab("") forgets every lab under BPFRoot that has no
// namespace left (netnsutil.LabPaths), which is what `down --all`
// after a crash needs and never touches a lab that is still up.
func ForgetLab(lab string) error {
	if lab == "" {
		labs, err := ListLabs()
		if err != nil {
			return err
		}
		var errs []error
		for _, l := range labs {
			if live, _ := netnsutil.LabPaths(l); len(live) > 0 {
				continue
			}
			errs = append(errs, ForgetLab(l))
		}
		return errors.Join(errs...)
	}
	dir, err := labPinDir(lab, false)
	if err != nil {
		return err
	}
	loaded.Lock()
	if o := loaded.labs[lab]; o != nil {
		o.Close()
		delete(loaded.labs, lab)
	}
	loaded.Unlock()
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("forget lab %s: %w", lab, err)
	}
	return nil
}

// ListLabs names the labs that have pinned port maps.
func ListLabs() ([]string, error) {
	return dirs.Subdirs(BPFRoot)
}

// CheckPrograms loads the port programs through the verifier and unloads
// them, without pinning or attaching anything: `fabric doctor` uses it to
// prove this kernel runs them (BTF, CO-RE, bpf_cast_to_kern_ctx,
// tp_btf/net_dev_start_xmit, bpf_skb_ecn_set_ce).
func CheckPrograms() error {
	spec, err := loadPort()
	if err != nil {
		return err
	}
	for _, m := range spec.Maps {
		m.Pinning = ebpf.PinNone
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		return err
	}
	coll.Close()
	return nil
}
