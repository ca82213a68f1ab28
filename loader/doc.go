// Package loader puts XDP programs on interfaces and lets a later process
// see and undo what is there: attach (driver, generic, offload, or auto),
// pin, reopen from pins, inspect, replace atomically, and detach.
//
// It is the only package that calls link or netlink attach functions.
//
// # Attaching
//
// Attach attaches through a bpf_link (link.AttachXDP) where the kernel has
// one for XDP (5.9 and later) and through rtnetlink otherwise, behind the
// same API; Options.Netlink forces the netlink path. In ModeAuto it asks the
// kernel's netdev generic-netlink family which XDP features the device has
// (Linux 6.3 and later) and picks driver mode if the device reports native
// XDP, generic mode if it does not; where that query is unavailable it tries
// driver mode and falls back to generic. Attachment.Reason says which mode
// was chosen and why.
//
// # Ours and foreign
//
// Every attachment made here carries a small read-only array map named
// xdpdrop_meta, bound to the program with BPF_PROG_BIND_MAP, holding JSON
// (Meta): the interface, mode, attach method, time, process and the
// caller's configuration. A program whose maps include a meta map naming
// its own interface (by index and network namespace, so a rename keeps it
// ours) is "ours", pinned or not; anything else on an interface is
// foreign, and Attach, Replace, Detach and DetachInterface refuse to touch
// it unless Force is set. The error (ErrForeign) says what is there and
// how to remove it. (A name or tag match would not do: `ip link` loading
// the same object gives a program with our name and tag.)
//
// # Pins
//
// With Options.Pin the link (bpf_link attachments only), the program, the
// meta map and the caller's named maps are pinned under
// PinRoot/IFNAME/ (default /sys/fs/bpf/xdpdrop/IFNAME/), an owner-only
// directory; bpffs is mounted at /sys/fs/bpf if absent. The directory is
// filled under a temporary name and renamed into place, so it is either
// complete or absent. bpffs refuses names with dots, so dots (and '%',
// ':') in interface and map names are %-escaped (eth0.100 -> eth0%2e100).
// Open reopens a pinned attachment in another process; Status reports
// pins whose interface or attachment is gone and CleanStale removes them.
// Pins whose link still runs on an interface that was since renamed are
// not stale: removing them would detach it.
//
// # Locking
//
// LockInterface takes a per-interface lock (a flock on a directory in the
// pin root) that serializes processes changing the same interface: hold
// it from Open (or the first look at what runs there) to the last write,
// e.g. around Open, a rule change and a ReplaceWithMaps. The functions here
// do not take it themselves, so that a caller can hold it across several
// of them; CleanStale, which works on every interface, takes each one's
// lock. RemoveStalePins removes the pins of one interface when removing
// them cannot detach anything (its link was detached with a deleted
// interface), for a caller that wants to attach anew.
//
// # Privilege
//
// Every directory on a pin path must belong to root or the caller and be
// writable by nobody else (sticky directories excepted), and the pin root
// must be the caller's (ErrUnsafePinDir otherwise): the owner-only pin
// directories are what lets their owner, and nobody else, use the pins.
// Nothing here needs CAP_SYS_ADMIN: programs that cannot be opened by id
// without it are told apart by the pinned program's id, and reported as
// opaque when they are not ours.
//
// # Lifetime
//
// Close releases an Attachment's file descriptors. A pinned attachment
// stays attached after Close; one that is not pinned is detached by Close
// (as closing an unpinned bpf_link would do), whichever method attached it.
// Detach removes the program and its pins.
//
// # Errors
//
// Errors wrap sentinels for what callers branch on (ErrNoInterface,
// ErrNotPermitted, ErrModeUnsupported, ErrVerifier, ErrNoBPFFS,
// ErrUnsafePinDir, ErrForeign, ErrAlreadyAttached, ErrNotPinned, ErrStale,
// ErrNotAttached, ErrLocked) and say what to do, naming the xdpdrop, bpftool
// or ip commands that do it (never Go identifiers: the CLI prints these
// errors as they are); a missing privilege is named as the capability this
// process lacks. After any error Attach leaves nothing attached or pinned
// that was not there before.
//
// Functions act in the network namespace of the calling thread; lock the
// goroutine to its thread (runtime.LockOSThread) when working in another
// namespace. An Attachment is safe for use by several goroutines.
package loader
