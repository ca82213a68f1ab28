// Package bpffs finds, mounts and prepares the BPF filesystem (bpffs), the
// only place where BPF objects (programs, maps, links) can be pinned so that
// they outlive the process that created them.
//
// A fresh machine often has nothing mounted at /sys/fs/bpf; Mount mounts it
// there (owner-only, like systemd does) unless it is already bpffs. MkdirOwner
// makes owner-only directories inside it: pins are capabilities, and anyone
// who can open them can replace or detach what they hold.
package bpffs
