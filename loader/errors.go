package loader

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xdpdrop/xdpdrop/internal/bpffs"
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
	// mounted.
	ErrNoBPFFS = bpffs.ErrNoBPFFS
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

// privHint names what the kernel wants for the operations here.
const privHint = "needs CAP_NET_ADMIN, CAP_BPF and CAP_PERFMON (CAP_SYS_ADMIN to inspect programs by id), or run as root"

// wrapErr wraps err once with context, adding ErrNotPermitted and what to do
// when the kernel said EPERM or EACCES.
func wrapErr(context string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
		return fmt.Errorf("%s: %w: %w (%s)", context, ErrNotPermitted, err, privHint)
	}
	return fmt.Errorf("%s: %w", context, err)
}

// isNotSupported reports whether err says the kernel lacks a feature.
func isNotSupported(err error) bool {
	return errors.Is(err, ebpf.ErrNotSupported)
}
