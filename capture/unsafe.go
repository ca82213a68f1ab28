package capture

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// ctlMem is the start of fd_main mapped shared: the word the program
// tests and the capture slots. The program reads them concurrently and
// other captures change them: every access is atomic. All of this
// package's unsafe code is here.
type ctlMem struct {
	mem []byte
}

// mapCtl maps the first n bytes (rounded up to pages) of m's value.
func mapCtl(m *ebpf.Map, n int) (*ctlMem, error) {
	page := unix.Getpagesize()
	n = (n + page - 1) / page * page
	if int(m.ValueSize()) < n || m.Flags()&unix.BPF_F_MMAPABLE == 0 {
		return nil, fmt.Errorf("map %s cannot hold capture slots", m)
	}
	mem, err := unix.Mmap(m.FD(), 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map the capture slots: %w", err)
	}
	return &ctlMem{mem: mem}, nil
}

func (c *ctlMem) word(off int) *atomic.Uint32 {
	_ = c.mem[off+3] // bounds
	return (*atomic.Uint32)(unsafe.Pointer(&c.mem[off]))
}

func (c *ctlMem) load(off int) uint32     { return c.word(off).Load() }
func (c *ctlMem) store(off int, v uint32) { c.word(off).Store(v) }
func (c *ctlMem) cas(off int, old, v uint32) bool {
	return c.word(off).CompareAndSwap(old, v)
}
func (c *ctlMem) or(off int, v uint32)  { c.word(off).Or(v) }
func (c *ctlMem) and(off int, v uint32) { c.word(off).And(v) }

func (c *ctlMem) close() error {
	if c.mem == nil {
		return nil
	}
	err := unix.Munmap(c.mem)
	c.mem = nil
	return err
}
