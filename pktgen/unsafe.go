package pktgen

// This file holds the package's only unsafe code: a BPF_PROG_TEST_RUN made
// directly, for the holding run (see hold.go). cilium/ebpf's Program.Run
// restarts a run that a signal interrupted, which is right for a test but
// leaves no way to stop a run that is meant to last until it is stopped.

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// testRunAttr is the BPF_PROG_TEST_RUN part of union bpf_attr
// (include/uapi/linux/bpf.h), up to batch_size.
type testRunAttr struct {
	progFD      uint32
	retval      uint32
	dataSizeIn  uint32
	dataSizeOut uint32
	dataIn      uint64
	dataOut     uint64
	repeat      uint32
	duration    uint32
	ctxSizeIn   uint32
	ctxSizeOut  uint32
	ctxIn       uint64
	ctxOut      uint64
	flags       uint32
	cpu         uint32
	batchSize   uint32
	_           uint32
}

// testRunLive makes one live-frames test run of prog with data (which
// begins with metaLen bytes of XDP metadata) on ifindex, and returns the
// kernel's error as it is: EINTR when a signal stopped it.
func testRunLive(progFD int, data []byte, metaLen uint32, ifindex int, repeat, batch uint32) unix.Errno {
	ctx := xdpMD{Data: metaLen, DataEnd: uint32(len(data)), IngressIfindex: uint32(ifindex)}
	attr := testRunAttr{
		progFD:     uint32(progFD),
		dataSizeIn: uint32(len(data)),
		dataIn:     uint64(uintptr(unsafe.Pointer(unsafe.SliceData(data)))),
		repeat:     repeat,
		ctxSizeIn:  uint32(unsafe.Sizeof(ctx)),
		ctxIn:      uint64(uintptr(unsafe.Pointer(&ctx))),
		flags:      unix.BPF_F_TEST_XDP_LIVE_FRAMES,
		batchSize:  batch,
	}
	// Syscall, not RawSyscall: the run lasts until it is stopped, and the
	// runtime must be free to hand this thread's P to other goroutines.
	_, _, errno := unix.Syscall(unix.SYS_BPF, unix.BPF_PROG_TEST_RUN, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	return errno
}
