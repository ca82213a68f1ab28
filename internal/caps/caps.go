package caps

import (
	"errors"
	"fmt"
	"math/bits"
	"strings"

	"golang.org/x/sys/unix"
)

// Cap is a Linux capability, by its number (unix.CAP_*).
type Cap uint

// The capabilities xdpdrop's operations need.
const (
	NetAdmin Cap = unix.CAP_NET_ADMIN // netlink changes, XSKMAP, attach
	NetRaw   Cap = unix.CAP_NET_RAW   // AF_XDP and AF_PACKET sockets
	IPCLock  Cap = unix.CAP_IPC_LOCK  // AF_XDP UMEM beyond RLIMIT_MEMLOCK
	SysAdmin Cap = unix.CAP_SYS_ADMIN // BPF objects by id, mounts
	BPF      Cap = unix.CAP_BPF       // maps and programs
	Perfmon  Cap = unix.CAP_PERFMON   // the verifier's pointer arithmetic
)

var names = map[Cap]string{
	NetAdmin: "CAP_NET_ADMIN",
	NetRaw:   "CAP_NET_RAW",
	IPCLock:  "CAP_IPC_LOCK",
	SysAdmin: "CAP_SYS_ADMIN",
	BPF:      "CAP_BPF",
	Perfmon:  "CAP_PERFMON",
}

func (c Cap) String() string {
	if n, ok := names[c]; ok {
		return n
	}
	return fmt.Sprintf("capability %d", uint(c))
}

// Set is a set of capabilities, bit n for capability n.
type Set uint64

// Of makes a set.
func Of(cs ...Cap) Set {
	var s Set
	for _, c := range cs {
		s |= 1 << c
	}
	return s
}

// Has reports whether c is in s.
func (s Set) Has(c Cap) bool { return s&(1<<c) != 0 }

// Caps lists s in ascending order.
func (s Set) Caps() []Cap {
	var out []Cap
	for v := uint64(s); v != 0; v &= v - 1 {
		out = append(out, Cap(bits.TrailingZeros64(v)))
	}
	return out
}

// String lists the names in s: "CAP_BPF", "CAP_NET_ADMIN and CAP_BPF",
// "none".
func (s Set) String() string {
	cs := s.Caps()
	if len(cs) == 0 {
		return "none"
	}
	n := make([]string, len(cs))
	for i, c := range cs {
		n[i] = c.String()
	}
	if len(n) == 1 {
		return n[0]
	}
	return strings.Join(n[:len(n)-1], ", ") + " and " + n[len(n)-1]
}

// Effective returns the calling thread's effective set (capget(2)).
func Effective() (Set, error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return 0, fmt.Errorf("read capabilities: %w", err)
	}
	return Set(data[0].Effective) | Set(data[1].Effective)<<32, nil
}

// Hint says what an operation that needs need wants from this process,
// for an error the kernel answered with EPERM or EACCES: which of need it
// lacks, or, if it holds them all, that the refusal has another cause.
func Hint(need Set) string {
	eff, err := Effective()
	if err != nil {
		return fmt.Sprintf("needs %s (%v)", need, err)
	}
	if missing := need &^ eff; missing != 0 {
		return fmt.Sprintf("needs %s; this process lacks %s: grant %s, or run as root", need, missing, them(missing))
	}
	return fmt.Sprintf("needs %s, which this process holds: the kernel refused for another reason (a security module, a sysctl, or a file's permissions)", need)
}

// Lacking is Hint for errors that may have another cause than privilege
// (a verifier rejection is EACCES too): "" when this process holds need.
func Lacking(need Set) string {
	eff, err := Effective()
	if err != nil || need&^eff == 0 {
		return ""
	}
	return Hint(need)
}

// Suffix is " (" + the hint + ")" for err when it is an EPERM or EACCES
// from an operation that needs need, "" otherwise; an EACCES while this
// process holds need gets "" too (the verifier's rejections are EACCES).
func Suffix(err error, need Set) string {
	switch {
	case errors.Is(err, unix.EPERM):
		return " (" + Hint(need) + ")"
	case errors.Is(err, unix.EACCES):
		if h := Lacking(need); h != "" {
			return " (" + h + ")"
		}
	}
	return ""
}

func them(s Set) string {
	if len(s.Caps()) == 1 {
		return "it"
	}
	return "them"
}
