package fastdrop

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// mapMem is the memory of a BPF_F_MMAPABLE array map from base on, mapped
// into the process only where and while it is accessed.
//
// The kernel maps every page of a BPF array at mmap time, so a mapping
// counts in the process's resident set in full from the start. Mapped
// whole, as ebpf.Map.Memory does, the maps of a million prefixes (the
// counters and records of millions of slots, the tbl8 pool, both halves of
// every table) put 700-900 MiB of the kernel's own memory into the RSS of
// the command that loads them, more than all its Go memory. Here a small
// access goes through one of a few cached windows of window bytes, and a
// larger one maps exactly its pages for the copy and unmaps them again.
//
// A mapMem is not safe for concurrent use (the engine's mutex serializes
// it). It does not own the map.
type mapMem struct {
	fd     int
	base   int64 // offset of this section in the map's memory
	size   int64 // bytes from base to the end of the map's memory
	window int64 // bytes per cached window, a multiple of the page size
	wins   []memWindow
	tick   uint64 // for least recently used
}

type memWindow struct {
	off  int64 // offset in the map's memory (window aligned)
	b    []byte
	used uint64
}

// newMapMem returns m's memory from base on, with up to nwin cached
// windows of window bytes (rounded to pages).
func newMapMem(m *ebpf.Map, base int64, window, nwin int) (*mapMem, error) {
	if m.Type() != ebpf.Array || m.Flags()&unix.BPF_F_MMAPABLE == 0 {
		return nil, fmt.Errorf("map %s is not an mmapable array", m)
	}
	page := int64(os.Getpagesize())
	// As the kernel lays an array out: values 8-byte aligned, the whole
	// rounded up to pages.
	total := (int64(m.ValueSize()+7) &^ 7) * int64(m.MaxEntries())
	total = (total + page - 1) &^ (page - 1)
	if base < 0 || base > total {
		return nil, fmt.Errorf("map %s: offset %d beyond its %d bytes", m, base, total)
	}
	w := max((int64(window)+page-1)&^(page-1), page)
	return &mapMem{fd: m.FD(), base: base, size: total - base, window: w, wins: make([]memWindow, 0, max(nwin, 1))}, nil
}

// access calls f with the n bytes at off mapped.
func (m *mapMem) access(off int64, n int, f func(b []byte)) error {
	abs := m.base + off
	// A window holds it?
	start := abs - abs%m.window
	if abs+int64(n) <= start+m.window {
		b, err := m.windowAt(start)
		if err != nil {
			return err
		}
		f(b[abs-start : abs-start+int64(n)])
		return nil
	}
	// Too big for one: its own pages, for this access only.
	page := int64(os.Getpagesize())
	pstart := abs &^ (page - 1)
	pend := (abs + int64(n) + page - 1) &^ (page - 1)
	b, err := unix.Mmap(m.fd, pstart, int(pend-pstart), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("map %d bytes of map memory: %w", pend-pstart, err)
	}
	f(b[abs-pstart : abs-pstart+int64(n)])
	if err := unix.Munmap(b); err != nil {
		return fmt.Errorf("unmap map memory: %w", err)
	}
	return nil
}

// windowAt returns the cached window at start (window aligned), mapping it
// in place of the least recently used one if it is not there.
func (m *mapMem) windowAt(start int64) ([]byte, error) {
	m.tick++
	lru := 0
	for i := range m.wins {
		if m.wins[i].off == start {
			m.wins[i].used = m.tick
			return m.wins[i].b, nil
		}
		if m.wins[i].used < m.wins[lru].used {
			lru = i
		}
	}
	end := min(start+m.window, m.base+m.size) // the map's end is page aligned
	b, err := unix.Mmap(m.fd, start, int(end-start), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map %d bytes of map memory: %w", end-start, err)
	}
	w := memWindow{off: start, b: b, used: m.tick}
	if len(m.wins) < cap(m.wins) {
		m.wins = append(m.wins, w)
		return b, nil
	}
	err = unix.Munmap(m.wins[lru].b)
	m.wins[lru] = w
	if err != nil {
		return nil, fmt.Errorf("unmap map memory: %w", err)
	}
	return b, nil
}

// clip limits an access of n bytes at off to the section.
func (m *mapMem) clip(off int64, n int) (int, error) {
	if off < 0 || off > m.size {
		return 0, fmt.Errorf("offset %d out of range", off)
	}
	return int(min(int64(n), m.size-off)), nil
}

func (m *mapMem) ReadAt(p []byte, off int64) (int, error) {
	n, err := m.clip(off, len(p))
	if err != nil {
		return 0, err
	}
	if n > 0 {
		if err := m.access(off, n, func(b []byte) { copy(p, b) }); err != nil {
			return 0, err
		}
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (m *mapMem) WriteAt(p []byte, off int64) (int, error) {
	n, err := m.clip(off, len(p))
	if err != nil {
		return 0, err
	}
	if n > 0 {
		if err := m.access(off, n, func(b []byte) { copy(b, p) }); err != nil {
			return 0, err
		}
	}
	if n < len(p) {
		return n, io.ErrShortWrite
	}
	return n, nil
}

// release unmaps the cached windows.
func (m *mapMem) release() error {
	if m == nil {
		return nil
	}
	var errs []error
	for _, w := range m.wins {
		if err := unix.Munmap(w.b); err != nil {
			errs = append(errs, fmt.Errorf("unmap map memory: %w", err))
		}
	}
	m.wins = m.wins[:0]
	return errors.Join(errs...)
}
