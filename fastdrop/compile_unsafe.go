package fastdrop

import (
	"fmt"
	"net/netip"
	"os"
	"sync/atomic"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xdpdrop/xdpdrop/gen"
)

// The table mirrors are kept as Go slices of the element types the program
// reads and copied into the maps' memory as bytes. The program is built for
// little-endian BPF only (bpfel), and so is this package, so the bytes of a
// []uint32 in Go's memory are the bytes the map wants.

func u32Bytes(s []uint32) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*4)
}

func u16Bytes(s []uint16) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*2)
}

func u64Bytes(s []uint64) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*8)
}

func bmBytes(s []bitmap) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*int(unsafe.Sizeof(bitmap{})))
}

func counterSlice(b []byte) []counterPair {
	n := len(b) / int(unsafe.Sizeof(counterPair{}))
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*counterPair)(unsafe.Pointer(&b[0])), n)
}

// region is anonymous memory of its own for a big table mirror (tens to
// hundreds of MiB), mapped once and unmapped by free. Its pages are
// populated in bulk (madvise MADV_POPULATE_WRITE), not one fault at a
// time: on virtual machines a page fault can cost 10-15 µs, which for
// 64 MiB is a quarter of a second.
type region struct{ b []byte }

func newRegion(size int) (*region, error) {
	if size == 0 {
		return &region{}, nil
	}
	b, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return nil, fmt.Errorf("map %d bytes of memory: %w", size, err)
	}
	_ = unix.Madvise(b, unix.MADV_HUGEPAGE) // fewer faults where THP is on; fine if not
	return &region{b: b}, nil
}

// populate faults in bytes [off, off+n) ahead of use (best effort).
func (r *region) populate(off, n int) {
	if n > 0 {
		_ = unix.Madvise(r.b[off:off+n], unix.MADV_POPULATE_WRITE)
	}
}

func (r *region) u32() []uint32 {
	if len(r.b) == 0 {
		return nil
	}
	return unsafe.Slice((*uint32)(unsafe.Pointer(&r.b[0])), len(r.b)/4)
}

func (r *region) free() error {
	if r == nil || r.b == nil {
		return nil
	}
	err := unix.Munmap(r.b)
	r.b = nil
	return err
}

// activeWord is fd_state.active, the first word of fd_main's value, in a
// mapping of its own. The flip to a new half must be a release store: the
// program reads the half's tables after it reads active, so every byte of
// the half written before the flip must be visible to a CPU that sees the
// new active. ebpf.Memory only copies bytes (WriteAt), which promises no
// ordering; sync/atomic's store does (it is sequentially consistent, which
// includes release: a plain MOV on x86, STLR on arm64). The program's read
// is the matching load (see fd_run in bpf/fastdrop.c).
type activeWord struct{ b []byte }

// mapActiveWord maps the first page of the fd_main map m (mmapable arrays
// may be mapped in part, from offset 0).
func mapActiveWord(m *ebpf.Map) (*activeWord, error) {
	b, err := unix.Mmap(m.FD(), 0, os.Getpagesize(), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map the state of %s: %w", m, err)
	}
	return &activeWord{b: b}, nil
}

func (w *activeWord) ptr() *uint32 { return (*uint32)(unsafe.Pointer(&w.b[0])) }

// store publishes the active half: everything written before it is visible
// to a reader that loads the new value.
func (w *activeWord) store(v uint32) { atomic.StoreUint32(w.ptr(), v) }

func (w *activeWord) load() uint32 { return atomic.LoadUint32(w.ptr()) }

// setRuleSamples sets or clears FD_CAP_RULES in fd_main's cap_active
// (capture.h), which is in the same page: captures change the word's
// other bits from other processes, so only atomically.
func (w *activeWord) setRuleSamples(on bool) {
	p := (*atomic.Uint32)(unsafe.Pointer(&w.b[capActiveOff]))
	if on {
		p.Or(capRules)
	} else {
		p.And(^capRules)
	}
}

const (
	capActiveOff = int(gen.FastdropFdLayoutFD_MAIN_CAP_ACTIVE)
	capRules     = uint32(gen.FastdropFdCapLayoutFD_CAP_RULES)
)

func (w *activeWord) close() error {
	if w == nil || w.b == nil {
		return nil
	}
	err := unix.Munmap(w.b)
	w.b = nil
	return err
}

// isSet reports whether r matches on the field f (a zero field matches
// anything). It reads the field at its offset in Rule (see
// matchField.at): r does not escape, so the callers, which run per rule
// over millions of rules, allocate nothing.
func (f *matchField) isSet(r *Rule) bool {
	switch f.store {
	case storeNum: // at is in r.Nums, not in r
		return r.Nums != nil && len(numAt(r.Nums, f.at).Items) > 0
	case storeProto:
		return r.HasProto || r.Nums != nil && len(numAt(r.Nums, f.numAt).Items) > 0
	}
	p := unsafe.Add(unsafe.Pointer(r), f.at)
	switch f.store {
	case storePrefix:
		return (*netip.Prefix)(p).IsValid()
	case storePtr:
		return *(*unsafe.Pointer)(p) != nil
	case storeU16:
		return *(*uint16)(p) != 0
	case storeBool:
		return *(*bool)(p)
	case storeU8:
		return *(*uint8)(p) != 0
	case storeB2:
		b := (*[2]byte)(p)
		return b[0]|b[1] != 0
	}
	panic("fastdrop: match field " + f.name + " has no store kind")
}

// prefixOf returns the prefix of r's address field f (store storePrefix).
func (f *matchField) prefixOf(r *Rule) *netip.Prefix {
	if f.store != storePrefix {
		panic("fastdrop: match field " + f.name + " is not a prefix")
	}
	return (*netip.Prefix)(unsafe.Add(unsafe.Pointer(r), f.at))
}

// raiseBanEnd raises fd_policers[0].ban_end (m is fd_policers) to end,
// atomically: the program raises it too, with compare-and-swap, when it
// bans, and a plain write could lower it under a ban just made.
func raiseBanEnd(m *ebpf.Map, end uint64) error {
	b, err := unix.Mmap(m.FD(), 0, os.Getpagesize(), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("map the policers of %s: %w", m, err)
	}
	p := (*atomic.Uint64)(unsafe.Pointer(&b[unsafe.Offsetof(gen.FastdropFdPolice{}.BanEnd)]))
	for {
		old := p.Load()
		if old >= end || p.CompareAndSwap(old, end) {
			break
		}
	}
	return unix.Munmap(b)
}

// numAt returns the Num at offset at of n (a numeric field's, storeNum).
func numAt(n *Nums, at uintptr) *Num { return (*Num)(unsafe.Add(unsafe.Pointer(n), at)) }

// numOf returns r's value of the numeric field f; r.Nums must not be nil.
func (f *matchField) numOf(r *Rule) *Num { return numAt(r.Nums, f.numAt) }

// word is the 4-byte word at the start of b, for atomic access to map
// memory that other processes and the program share.
func word(b []byte) *atomic.Uint32 {
	_ = b[3] // bounds
	return (*atomic.Uint32)(unsafe.Pointer(&b[0]))
}

// confFeaturesOff is fd_conf.features' offset in its struct.
const confFeaturesOff = int64(unsafe.Offsetof(gen.FastdropFdConf{}.Features))
