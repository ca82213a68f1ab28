// Package bpffs finds, mounts and prepares the BPF filesystem (bpffs), the
// only place where BPF objects (programs, maps, links) can be pinned so that
// they outlive the process that created them.
//
// A fresh machine often has nothing mounted at /sys/fs/bpf; Mount mounts it
// there (owner-only, like systemd does) unless it is already bpffs, and
// InInitialMountNS tells whether such a mount would outlive this process's
// mount namespace. MkdirOwner makes owner-only directories inside it, and
// CheckPath checks every directory on a pin path for owner, mode and
// symbolic links: pins are capabilities, and anyone who can open them, or
// move them, can replace or detach what they hold.
package bpffs
