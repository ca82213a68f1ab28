package main

import (
	"errors"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/xdpdrop/xdpdrop/internal/caps"
	"github.com/xdpdrop/xdpdrop/loader"
)

// memlockAdvice is what cilium/ebpf appends to an EPERM from creating a map
// or loading a program. It names a Go function and is wrong here: since
// Linux 5.11 BPF memory is charged to the cgroup, not RLIMIT_MEMLOCK, and
// the EPERM is a missing capability, which the packages' own hints name.
const memlockAdvice = " (MEMLOCK may be too low, consider rlimit.RemoveMemlock)"

// explain turns an error into the one line a user sees. The packages' own
// messages already say what went wrong and what to do; here we only add
// what a bare errno would leave out.
func explain(err error) string {
	msg := strings.ReplaceAll(err.Error(), memlockAdvice, "")
	if (errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES)) && !strings.Contains(msg, "CAP_") &&
		!errors.Is(err, loader.ErrNotPermitted) && !errors.Is(err, loader.ErrUnsafePinDir) { // explained there
		return msg + " (" + caps.Hint(caps.Of(caps.NetAdmin, caps.BPF, caps.Perfmon)) + ")"
	}
	return msg
}
