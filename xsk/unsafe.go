package xsk

// This file holds all of the package's unsafe code: typed views of the ring
// memory the kernel shares with us, the socket options whose arguments are
// structs, the wakeup system calls, and the offset of a frame's data in the
// UMEM. Nothing else in the package imports unsafe.

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// Sizes of the structs the kernel fills in. Older kernels answer
// XDP_MMAP_OFFSETS without the flags fields (v1) and XDP_STATISTICS with the
// first three counters only.
const (
	sizeofMmapOffsets   = unsafe.Sizeof(unix.XDPMmapOffsets{})
	sizeofMmapOffsetsV1 = 4 * 3 * 8
	sizeofStatistics    = unsafe.Sizeof(unix.XDPStatistics{})
	sizeofStatisticsV1  = 3 * 8
	sizeofDesc          = unsafe.Sizeof(unix.XDPDesc{})
)

// ringView turns a ring's mapping into pointers to its producer, consumer
// and flags words and a slice of its n entries of type T. The kernel lays
// these out at the offsets it reported; we only index within them.
func ringView[T any](mem []byte, off unix.XDPRingOffset, n uint32) (prod, cons, flags *uint32, entries []T) {
	base := unsafe.Pointer(unsafe.SliceData(mem))
	prod = (*uint32)(unsafe.Add(base, off.Producer))
	cons = (*uint32)(unsafe.Add(base, off.Consumer))
	flags = (*uint32)(unsafe.Add(base, off.Flags))
	entries = unsafe.Slice((*T)(unsafe.Add(base, off.Desc)), n)
	return prod, cons, flags, entries
}

// entrySize is the size of one ring entry of type T.
func entrySize[T any]() uint64 {
	var zero T
	return uint64(unsafe.Sizeof(zero))
}

// getMmapOffsets reads XDP_MMAP_OFFSETS, converting the v1 layout of old
// kernels (no flags word) to the current one. For v1 the flags word does not
// exist; we point it at the word after the consumer index as libxdp does,
// which on those kernels always reads 0 (need_wakeup unsupported there).
func getMmapOffsets(fd int) (unix.XDPMmapOffsets, error) {
	var off unix.XDPMmapOffsets
	l := uint32(sizeofMmapOffsets)
	_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_XDP, unix.XDP_MMAP_OFFSETS,
		uintptr(unsafe.Pointer(&off)), uintptr(unsafe.Pointer(&l)), 0)
	if errno != 0 {
		return off, errno
	}
	if l == sizeofMmapOffsetsV1 {
		// The kernel wrote the v1 layout into the start of off.
		v1 := *(*[4][3]uint64)(unsafe.Pointer(&off))
		conv := func(r [3]uint64) unix.XDPRingOffset {
			return unix.XDPRingOffset{Producer: r[0], Consumer: r[1], Desc: r[2], Flags: r[1] + 4}
		}
		off = unix.XDPMmapOffsets{Rx: conv(v1[0]), Tx: conv(v1[1]), Fr: conv(v1[2]), Cr: conv(v1[3])}
	}
	return off, nil
}

// registerUMEM performs XDP_UMEM_REG for the memory mem.
func registerUMEM(fd int, mem []byte, frameSize, headroom, flags uint32) error {
	reg := unix.XDPUmemReg{
		Addr:     uint64(uintptr(unsafe.Pointer(unsafe.SliceData(mem)))),
		Len:      uint64(len(mem)),
		Size:     frameSize,
		Headroom: headroom,
		Flags:    flags,
	}
	_, _, errno := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_XDP, unix.XDP_UMEM_REG,
		uintptr(unsafe.Pointer(&reg)), unsafe.Sizeof(reg), 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// getStatistics reads XDP_STATISTICS and reports how many of its counters
// the kernel filled in (3 on kernels before 5.9, 6 after).
func getStatistics(fd int) (unix.XDPStatistics, int, error) {
	var st unix.XDPStatistics
	l := uint32(sizeofStatistics)
	_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_XDP, unix.XDP_STATISTICS,
		uintptr(unsafe.Pointer(&st)), uintptr(unsafe.Pointer(&l)), 0)
	if errno != 0 {
		return st, 0, errno
	}
	return st, int(l / 8), nil
}

// wakeRX is the non-blocking recvfrom(fd, NULL, 0, MSG_DONTWAIT) that wakes
// the kernel's receive side (or drives a busy-poll round). It cannot block,
// so the raw form is used: it saves the scheduler hand-off of a system call
// that may sleep.
func wakeRX(fd int) unix.Errno {
	_, _, errno := unix.RawSyscall6(unix.SYS_RECVFROM, uintptr(fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	return errno
}

// pollNow is ppoll(fd, 1, {0, 0}, NULL) on pfd: what poll mode asks the
// kernel before every batch when the RX ring already shows frames (in copy
// mode poll() also drives pending transmits). With a zero timeout it
// cannot sleep, so the raw form is used: no scheduler hand-off, and the
// runtime's monitor thread does not see a system call whose P it could
// take away (which it does for one that lasts over 20µs, costing a wake-up
// of another thread each time).
func pollNow(pfd *unix.PollFd) unix.Errno {
	var zero unix.Timespec
	pfd.Revents = 0
	_, _, errno := unix.RawSyscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(pfd)), 1, uintptr(unsafe.Pointer(&zero)), 0, 0, 0)
	return errno
}

// pollFor is ppoll(pfd, 1, ts, NULL) in the raw form: the thread sleeps
// in the kernel while keeping its P, so that when frames come it runs on
// at once instead of first getting a P back (the blocking system call's
// hand-off, which on a CPU shared with the kernel's receive work can take
// longer than the RX ring lasts). Only for short waits: the runtime's
// preemption signal interrupts it (EINTR), so neither the garbage
// collector nor other goroutines wait for more than the runtime's
// preemption interval, as with a goroutine that spins. Linux's ppoll()
// writes the time left back into *ts, on EINTR too (see ppoll(2)), which
// is what bounds a wait made of several calls without reading a clock.
func pollFor(pfd *unix.PollFd, ts *unix.Timespec) (int, unix.Errno) {
	pfd.Revents = 0
	n, _, errno := unix.RawSyscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(pfd)), 1, uintptr(unsafe.Pointer(ts)), 0, 0, 0)
	return int(n), errno
}

// wakeTX is sendto(fd, NULL, 0, MSG_DONTWAIT, NULL, 0). In copy mode the
// kernel transmits inside this call, so it does real work but never sleeps.
func wakeTX(fd int) unix.Errno {
	_, _, errno := unix.RawSyscall6(unix.SYS_SENDTO, uintptr(fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	return errno
}

// dataOffset returns where b starts, as an offset into mem, and whether it
// lies inside mem at all. The UMEM is one mapping, so comparing addresses
// within it is well defined; b may also point elsewhere (a user error),
// which the bounds check catches.
func dataOffset(mem, b []byte) (uint64, bool) {
	base := uintptr(unsafe.Pointer(unsafe.SliceData(mem)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	if p < base || p-base > uintptr(len(mem)) {
		return 0, false
	}
	return uint64(p - base), true
}
