// Package features finds out what the running kernel and host can do for
// fabric: which qdiscs exist, whether tc can run eBPF (cls_bpf), BTF,
// struct_ops, the TCP congestion controls, and whether Docker answers.
// Checks are real: a qdisc counts as present only when the kernel accepts
// it on a link, in a throwaway namespace that is deleted afterwards.
package features

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fabric-emu/fabric/internal/netnsutil"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	ebpffeatures "github.com/cilium/ebpf/features"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Qdiscs are the queueing disciplines fabric may use or that lab settings
// may need (netem for delay); the rest are listed so that a user comparing
// kernels sees what differs.
var Qdiscs = []string{"htb", "tbf", "bfifo", "pfifo", "clsact", "ingress", "netem", "prio", "red", "fq", "fq_codel", "sfq", "drr", "ets", "mqprio"}

// Report is what Detect found.
type Report struct {
	Kernel             string          `json:"kernel"`
	Qdiscs             map[string]bool `json:"qdiscs"`
	QdiscErr           string          `json:"qdisc_error,omitempty"`
	ClsBPF             bool            `json:"cls_bpf"`
	ClsBPFErr          string          `json:"cls_bpf_error,omitempty"`
	BTF                bool            `json:"btf"`
	StructOps          bool            `json:"struct_ops"`
	StructOpsErr       string          `json:"struct_ops_error,omitempty"`
	CongestionControls []string        `json:"congestion_controls"`
	Docker             bool            `json:"docker"`
	DockerErr          string          `json:"docker_error,omitempty"`
}

// HasCC reports whether the kernel offers congestion control name.
func (r *Report) HasCC(name string) bool { return slices.Contains(r.CongestionControls, name) }

// Detect runs every check. It needs root for the qdisc, cls_bpf and
// struct_ops checks; without it those report the permission error.
func Detect(ctx context.Context) *Report {
	r := &Report{}
	var uts unix.Utsname
	if unix.Uname(&uts) == nil {
		r.Kernel = unix.ByteSliceToString(uts.Release[:])
	}
	q, err := qdiscs()
	r.Qdiscs = q.present
	if err != nil {
		r.QdiscErr = err.Error()
	}
	if q.clsBPF != nil {
		r.ClsBPFErr = q.clsBPF.Error()
	} else {
		r.ClsBPF = err == nil
	}
	_, err = os.Stat("/sys/kernel/btf/vmlinux")
	r.BTF = err == nil
	r.StructOps, err = structOps()
	if err != nil {
		r.StructOpsErr = err.Error()
	}
	if b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_available_congestion_control"); err == nil {
		r.CongestionControls = strings.Fields(string(b))
	}
	if err := pingDocker(ctx); err != nil {
		r.DockerErr = err.Error()
	} else {
		r.Docker = true
	}
	return r
}

// HasQdisc reports whether the kernel accepts qdisc kind. The check runs
// once per process.
func HasQdisc(kind string) bool {
	q, _ := qdiscs()
	return q.present[kind]
}

type qdiscCheck struct {
	present map[string]bool
	clsBPF  error
}

var qdiscsOnce = sync.OnceValues(detectQdiscs)

func qdiscs() (qdiscCheck, error) { return qdiscsOnce() }

// detectQdiscs creates a namespace that no path names (it disappears when
// its last file descriptor closes), adds a veth pair in it, and tries each
// qdisc kind as the root of one end. The kernel answers ENOENT ("unknown
// qdisc kind") for a missing kind, after trying to load its module; any
// other answer, including EINVAL for options we did not send, means the
// kind exists.
func detectQdiscs() (qdiscCheck, error) {
	out := qdiscCheck{present: map[string]bool{}}
	ns, err := netnsutil.Anonymous()
	if err != nil {
		return out, err
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		return out, err
	}
	defer h.Close()
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "feat0"}, PeerName: "feat1"}
	if err := h.LinkAdd(veth); err != nil {
		return out, fmt.Errorf("veth in the check's namespace: %w", err)
	}
	link, err := h.LinkByName("feat0")
	if err != nil {
		return out, err
	}
	idx := link.Attrs().Index
	for _, kind := range Qdiscs {
		attrs := netlink.QdiscAttrs{LinkIndex: idx, Handle: netlink.MakeHandle(0x99, 0), Parent: netlink.HANDLE_ROOT}
		if kind == "clsact" || kind == "ingress" {
			attrs = netlink.QdiscAttrs{LinkIndex: idx, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT}
			if kind == "ingress" {
				attrs.Handle, attrs.Parent = netlink.MakeHandle(0xffff, 0), netlink.HANDLE_INGRESS
			}
		}
		q := &netlink.GenericQdisc{QdiscAttrs: attrs, QdiscType: kind}
		err := h.QdiscAdd(q)
		out.present[kind] = !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EOPNOTSUPP)
		if err == nil {
			_ = h.QdiscDel(q)
		}
	}
	// The other end of the pair is untouched by the qdisc checks.
	peer, err := h.LinkByName("feat1")
	if err != nil {
		return out, err
	}
	out.clsBPF = checkClsBPF(h, peer.Attrs().Index)
	return out, nil
}

// checkClsBPF attaches a two-instruction tc program in direct-action mode.
func checkClsBPF(h *netlink.Handle, idx int) error {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:         ebpf.SchedCLS,
		License:      "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()},
	})
	if err != nil {
		return fmt.Errorf("load tc program: %w", err)
	}
	defer prog.Close()
	clsact := &netlink.Clsact{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: idx, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT}}
	if err := h.QdiscAdd(clsact); err != nil {
		return fmt.Errorf("clsact: %w", err)
	}
	f := &netlink.BpfFilter{
		FilterAttrs: netlink.FilterAttrs{LinkIndex: idx, Parent: netlink.HANDLE_MIN_EGRESS, Handle: 1, Priority: 1, Protocol: unix.ETH_P_ALL},
		Fd:          prog.FD(), Name: "features", DirectAction: true,
	}
	if err := h.FilterAdd(f); err != nil {
		return fmt.Errorf("attach cls_bpf: %w", err)
	}
	return nil
}

// structOps checks that the kernel has struct_ops programs and exposes
// tcp_congestion_ops to them (what a BPF DCTCP needs).
func structOps() (bool, error) {
	if err := ebpffeatures.HaveProgramType(ebpf.StructOps); err != nil {
		return false, err
	}
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		return false, fmt.Errorf("kernel BTF: %w", err)
	}
	var st *btf.Struct
	if err := spec.TypeByName("tcp_congestion_ops", &st); err != nil {
		return false, fmt.Errorf("tcp_congestion_ops not in kernel BTF: %w", err)
	}
	return true, nil
}

// DockerSocket is where the Docker daemon listens.
const DockerSocket = "/var/run/docker.sock"

func pingDocker(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", DockerSocket)
		},
	}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://docker/_ping", nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("docker /_ping: %s", resp.Status)
	}
	return nil
}
