package loader

// The one file of this package with unsafe: the single bpf(2) command that
// cilium/ebpf does not export.

import (
	"runtime"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// progBindMapAttr is union bpf_attr for BPF_PROG_BIND_MAP.
type progBindMapAttr struct {
	progFD uint32
	mapFD  uint32
	flags  uint32
}

// bindMap adds m to prog's used maps (BPF_PROG_BIND_MAP, Linux 5.10), so
// that m lives as long as prog and shows up in prog's map ids; this is how
// bpftool attaches metadata to programs too.
func bindMap(prog *ebpf.Program, m *ebpf.Map) error {
	attr := progBindMapAttr{progFD: uint32(prog.FD()), mapFD: uint32(m.FD())}
	_, _, errno := unix.Syscall(unix.SYS_BPF, unix.BPF_PROG_BIND_MAP, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	runtime.KeepAlive(prog)
	runtime.KeepAlive(m)
	if errno != 0 {
		return errno
	}
	return nil
}
