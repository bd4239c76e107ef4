package cc

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

const vmlinuxBTF = "/sys/kernel/btf/vmlinux"

// ErrKernelRefused wraps every reason the kernel cannot run fabric's DCTCP:
// no BTF, no struct_ops for tcp_congestion_ops, the verifier's rejection, or
// missing privileges.
var ErrKernelRefused = errors.New("kernel cannot register BPF DCTCP")

// mapNameFor is the kernel object name of the struct_ops map registering
// ccName. It is how Ensure recognises fabric's registrations among all
// struct_ops links (BPF object names are at most 15 characters).
func mapNameFor(ccName string) string {
	n := "fabcc_" + ccName
	if len(n) > unix.BPF_OBJ_NAME_LEN-1 {
		n = n[:unix.BPF_OBJ_NAME_LEN-1]
	}
	return n
}

// checkKernel explains, before any load, why this kernel cannot take a BPF
// congestion control.
func checkKernel() error {
	if _, err := os.Stat(vmlinuxBTF); err != nil {
		return fmt.Errorf("%w: no kernel BTF at %s (needs CONFIG_DEBUG_INFO_BTF=y)", ErrKernelRefused, vmlinuxBTF)
	}
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		return fmt.Errorf("%w: reading kernel BTF: %v", ErrKernelRefused, err)
	}
	var value *btf.Struct
	if err := spec.TypeByName("bpf_struct_ops_tcp_congestion_ops", &value); err != nil {
		return fmt.Errorf("%w: kernel has no struct_ops for tcp_congestion_ops (needs Linux ≥ 5.6 with CONFIG_BPF_JIT and CONFIG_BPF_SYSCALL)", ErrKernelRefused)
	}
	return nil
}

// dctcpSpec returns the DCTCP collection, renamed so that the kernel
// registers it as ccName.
func dctcpSpec(ccName string) (*ebpf.CollectionSpec, error) {
	if len(ccName) >= 16 {
		return nil, fmt.Errorf("congestion control name %q longer than 15 bytes", ccName)
	}
	spec, err := loadDctcp()
	if err != nil {
		return nil, err
	}
	ms := spec.Maps[dctcpMapFabricDctcp]
	if ms == nil || len(ms.Contents) != 1 {
		return nil, fmt.Errorf("dctcp object: struct_ops map %q missing", dctcpMapFabricDctcp)
	}
	ops, ok := ms.Value.(*btf.Struct)
	if !ok {
		return nil, fmt.Errorf("dctcp object: struct_ops value is %T, not a struct", ms.Value)
	}
	data, ok := ms.Contents[0].Value.([]byte)
	if !ok {
		return nil, fmt.Errorf("dctcp object: struct_ops data is %T", ms.Contents[0].Value)
	}
	data = append([]byte(nil), data...)
	var nameField *btf.Member
	for i := range ops.Members {
		if ops.Members[i].Name == "name" {
			nameField = &ops.Members[i]
		}
	}
	if nameField == nil {
		return nil, errors.New("dctcp object: tcp_congestion_ops has no name field")
	}
	off := int(nameField.Offset.Bytes())
	name := make([]byte, 16)
	copy(name, ccName)
	copy(data[off:off+16], name)
	ms.Contents[0].Value = data
	ms.Name = mapNameFor(ccName)
	return spec, nil
}

// registration is one struct_ops link this process holds.
type registration struct {
	link link.Link
	objs *ebpf.Collection // nil when adopted from another holder
}

func (r *registration) close() error {
	err := r.link.Close()
	if r.objs != nil {
		r.objs.Close()
	}
	return err
}

// register loads fabric's DCTCP and registers it as ccName. The kernel answers
// EEXIST when the name is taken; callers check errors.Is(err, os.ErrExist).
func register(ccName string) (*registration, error) {
	if err := checkKernel(); err != nil {
		return nil, err
	}
	spec, err := dctcpSpec(ccName)
	if err != nil {
		return nil, err
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		return nil, refusal("loading the DCTCP struct_ops programs", err)
	}
	l, err := link.AttachStructOps(link.StructOpsOptions{Map: coll.Maps[dctcpMapFabricDctcp]})
	if err != nil {
		coll.Close()
		if errors.Is(err, unix.EEXIST) {
			return nil, fmt.Errorf("registering %q: %w", ccName, os.ErrExist)
		}
		return nil, refusal(fmt.Sprintf("registering %q", ccName), err)
	}
	return &registration{link: l, objs: coll}, nil
}

// verify loads the programs without registering them: the verifier's
// verdict, for `fabric doctor`.
func verify() error {
	if err := checkKernel(); err != nil {
		return err
	}
	spec, err := dctcpSpec("fabric_probe")
	if err != nil {
		return err
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		return refusal("loading the DCTCP struct_ops programs", err)
	}
	coll.Close()
	return nil
}

func refusal(what string, err error) error {
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
		return fmt.Errorf("%w: %s: %v (needs root: CAP_BPF, CAP_NET_ADMIN, CAP_SYS_ADMIN)", ErrKernelRefused, what, err)
	}
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) {
		return fmt.Errorf("%w: %s: verifier: %+v", ErrKernelRefused, what, ve)
	}
	return fmt.Errorf("%w: %s: %v", ErrKernelRefused, what, err)
}

// adopt finds fabric's live registration of ccName and takes a reference to
// its link, so the registration outlives whoever made it for as long as we
// hold it. It returns (nil, nil) when no fabric struct_ops link registers
// ccName.
func adopt(ccName string) (*registration, error) {
	want := mapNameFor(ccName)
	var it link.Iterator
	defer it.Close()
	for it.Next() {
		info, err := it.Link.Info()
		if err != nil || info.Type != link.StructOpsType {
			continue
		}
		mapID, err := structOpsMapID(it.Link)
		if err != nil {
			continue
		}
		m, err := ebpf.NewMapFromID(mapID)
		if err != nil {
			continue // went away meanwhile
		}
		mi, err := m.Info()
		m.Close()
		if err != nil || mi.Name != want {
			continue
		}
		return &registration{link: it.Take()}, nil
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("listing BPF links: %w", err)
	}
	return nil, nil
}

// structOpsMapID reads bpf_link_info.struct_ops.map_id, which cilium/ebpf
// v0.22 does not decode.
func structOpsMapID(l link.Link) (ebpf.MapID, error) {
	fder, ok := l.(interface{ FD() int })
	if !ok {
		return 0, errors.New("link has no file descriptor")
	}
	// struct bpf_link_info { __u32 type, id, prog_id; union { ...
	// struct { __u32 map_id; } struct_ops; ... } } — the union starts at
	// offset 16 because some members hold __u64s.
	info := new([64]byte) // on the heap: the kernel writes through a plain address
	attr := struct {
		fd      uint32
		infoLen uint32
		info    uint64
	}{uint32(fder.FD()), uint32(len(info)), uint64(uintptr(unsafe.Pointer(info)))}
	_, _, errno := unix.Syscall(unix.SYS_BPF, unix.BPF_OBJ_GET_INFO_BY_FD,
		uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	runtime.KeepAlive(info)
	if errno != 0 {
		return 0, errno
	}
	return ebpf.MapID(*(*uint32)(unsafe.Pointer(&info[16]))), nil
}

// repairsMapName is the map in which bpf/dctcp.bpf.c counts the values it
// repaired after the kernel lost a callback's return value (see the comment
// above repair() there, and README.md).
const repairsMapName = dctcpMapDctcpRepairs

// KernelBugRepairs sums, over every fabric DCTCP registration alive on this
// machine, how many windows or thresholds the BPF program had to put back
// because the kernel lost a callback's return value. Zero on kernels
// without the bug (and when the kernel's own dctcp is in use).
func KernelBugRepairs() (uint64, error) {
	var total uint64
	for id := ebpf.MapID(0); ; {
		next, err := ebpf.MapGetNextID(id)
		if errors.Is(err, os.ErrNotExist) {
			return total, nil
		}
		if err != nil {
			return total, fmt.Errorf("listing BPF maps: %w", err)
		}
		id = next
		m, err := ebpf.NewMapFromID(id)
		if err != nil {
			continue // gone meanwhile
		}
		info, err := m.Info()
		if err == nil && info.Name == repairsMapName {
			var n uint64
			if err := m.Lookup(uint32(0), &n); err == nil {
				total += n
			}
		}
		m.Close()
	}
}
