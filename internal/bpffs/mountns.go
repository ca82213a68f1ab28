package bpffs

import (
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// mntNSInitIno is the inode number of the initial mount namespace from
// Linux 6.18 on (MNT_NS_INIT_INO in linux/nsfs.h); before, it was
// allocated at boot like any other.
const mntNSInitIno = 0xEFFFFFF8

// InInitialMountNS reports whether the calling thread runs in the initial
// (the host's) mount namespace. A bpffs mounted in another one, with the
// pins in it, is gone when that namespace ends (the last process of an
// `unshare -m` or a container exits). known is false when it cannot tell:
// a kernel before 6.18 and /proc/1/ns/mnt unreadable (as for a process
// without CAP_SYS_PTRACE that cannot trace init).
//
// Before 6.18 the answer compares with pid 1's namespace, which in a PID
// namespace is that namespace's init: a container's, not the host's.
func InInitialMountNS() (initial, known bool) {
	var self unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/mnt", &self); err != nil {
		return false, false
	}
	if self.Ino == mntNSInitIno || fixedInitInos() {
		return self.Ino == mntNSInitIno, true
	}
	var init unix.Stat_t
	if err := unix.Stat("/proc/1/ns/mnt", &init); err != nil {
		return false, false
	}
	return self.Dev == init.Dev && self.Ino == init.Ino, true
}

// fixedInitInos reports whether the kernel gives the initial namespaces
// fixed inode numbers, the mount namespace included (Linux 6.18).
func fixedInitInos() bool {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return false
	}
	major, minor, ok := kernelVersion(unix.ByteSliceToString(u.Release[:]))
	return ok && (major > 6 || major == 6 && minor >= 18)
}

// kernelVersion parses the start of a release string: "6.18.44-fc" is 6, 18.
func kernelVersion(rel string) (major, minor int, ok bool) {
	a, rest, _ := strings.Cut(rel, ".")
	b, _, _ := strings.Cut(rest, ".")
	for i, c := range b {
		if c < '0' || c > '9' {
			b = b[:i]
			break
		}
	}
	major, err1 := strconv.Atoi(a)
	minor, err2 := strconv.Atoi(b)
	return major, minor, err1 == nil && err2 == nil
}
