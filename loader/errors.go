package loader

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xdpdrop/xdpdrop/internal/bpffs"
	"github.com/xdpdrop/xdpdrop/internal/caps"
)

// Sentinel errors, for errors.Is. The errors returned wrap one (or more) of
// these together with the underlying errno, and say what to do.
var (
	// ErrNoInterface: the named interface does not exist (in the calling
	// thread's network namespace).
	ErrNoInterface = errors.New("no such interface")
	// ErrNotPermitted: the kernel refused for lack of privilege.
	ErrNotPermitted = errors.New("not permitted")
	// ErrModeUnsupported: the device (or kernel) cannot run XDP in the
	// requested mode.
	ErrModeUnsupported = errors.New("XDP mode not supported")
	// ErrVerifier: the kernel's verifier rejected the program.
	ErrVerifier = errors.New("program rejected by the verifier")
	// ErrNoBPFFS: pinning needs bpffs, which is not mounted and could not be
	// mounted (or would not outlive this mount namespace if it were).
	ErrNoBPFFS = bpffs.ErrNoBPFFS
	// ErrUnsafePinDir: a directory on the pin path belongs to another user,
	// is a symbolic link or may be changed by others; nothing is read from
	// or pinned below it.
	ErrUnsafePinDir = bpffs.ErrUnsafe
	// ErrForeign: the interface runs an XDP program that is not ours; it is
	// left alone unless Force is set.
	ErrForeign = errors.New("interface runs an XDP program that is not ours")
	// ErrAlreadyAttached: the interface already runs a program of ours.
	ErrAlreadyAttached = errors.New("interface already runs an xdpdrop program")
	// ErrNotPinned: there is no pinned attachment for the interface.
	ErrNotPinned = errors.New("no pinned attachment")
	// ErrStale: pins exist but what they describe is no longer attached.
	ErrStale = errors.New("stale pins")
	// ErrNotAttached: the interface runs no XDP program, or ours is gone.
	ErrNotAttached = errors.New("no XDP program attached")
)

// needLoader is what most operations of this package need: CAP_BPF for
// maps (the metadata map), CAP_NET_ADMIN to attach and detach, and
// CAP_PERFMON, without which the verifier refuses the pointer arithmetic
// of xdpdrop's programs. Inspecting other programs by id needs
// CAP_SYS_ADMIN, which nothing requires: without it they are reported as
// not inspectable (see survey).
const needLoader = caps.Set(1)<<caps.NetAdmin | caps.Set(1)<<caps.BPF | caps.Set(1)<<caps.Perfmon

// wrapErr wraps err once with context, adding ErrNotPermitted and what to do
// when the kernel said EPERM or EACCES: which of the capabilities the
// operations here need this process lacks, or, for a file, whose the
// directory is.
func wrapErr(context string, err error) error {
	return wrapNeed(context, err, needLoader)
}

// wrapNeed is wrapErr for an operation that needs the capabilities need.
func wrapNeed(context string, err error, need caps.Set) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, bpffs.ErrUnsafe) {
		return fmt.Errorf("%s: %w", context, err) // says whose directory it is
	}
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
		var pe *fs.PathError
		var le *os.LinkError
		switch {
		case errors.As(err, &pe):
			return fmt.Errorf("%s: %w: %w (%s)", context, ErrNotPermitted, err, fileHint(pe.Path))
		case errors.As(err, &le):
			return fmt.Errorf("%s: %w: %w (%s)", context, ErrNotPermitted, err, fileHint(le.New))
		}
		return fmt.Errorf("%s: %w: %w (%s)", context, ErrNotPermitted, err, caps.Hint(need))
	}
	return fmt.Errorf("%s: %w", context, err)
}

// fileHint says whose the directory of path is, for a file operation
// refused by the file's permissions (no capability is involved).
func fileHint(path string) string {
	dir := filepath.Dir(path)
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return "a file permission, not a capability: this process runs as " + bpffs.UserName(os.Geteuid())
	}
	return fmt.Sprintf("a file permission, not a capability: %s belongs to %s (mode %04o) and this process runs as %s: run as its owner, or use a pin root of your own (--pin-root)",
		dir, bpffs.UserName(int(st.Uid)), st.Mode&0o7777, bpffs.UserName(os.Geteuid()))
}

// isNotSupported reports whether err says the kernel lacks a feature.
func isNotSupported(err error) bool {
	return errors.Is(err, ebpf.ErrNotSupported)
}
