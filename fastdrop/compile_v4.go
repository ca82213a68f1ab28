package fastdrop

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"

	"github.com/xdpdrop/xdpdrop/gen"
)

// v4Table is the IPv4 prefix table as DIR-24-8 (Gupta, Lin and McKeown
// 1998; DPDK's rte_lpm): tbl24 holds, for each /24, the val of the longest
// prefix of length <= 24 covering it, or (bit 31) the number of a tbl8
// group of 256 entries that resolves the last 8 bits. A lookup is one read,
// or two for /24s that hold longer prefixes.
//
// tbl24 exists once per half in the kernel; this Go copy is the truth, and
// what changed in it (dirty pages) is copied to each half. The tbl8 groups
// are one pool that both halves share, copy-on-write: a group either half
// may read is never written; a change goes to a fresh group, the /24 entry
// is pointed at it in the half being written, and the old group is freed
// once no half points to it. So a group is written once, not once per half,
// and has no copy in Go (groups are read back from the kernel to change).
//
// A /24 whose only longer prefixes are a few host routes (/32s, at most
// sparseMax) gets a sparse group instead: 64 bytes listing the hosts by
// last byte, with the /24's own val for every other address. A blocklist
// of random addresses puts one or two hosts in most /24s it touches, so
// 1M of them take 64 MiB of sparse groups instead of 1 GiB of tbl8 groups.
// Sparse groups are a second pool, shared and copy-on-write like the
// first. A /24 that needs more (a /25-/31, or more hosts) is made dense.
type v4Table struct {
	tbl24 []uint32 // tbl24Entries
	mem24 *region
	// touched24: tbl24 was populated or written (and may hold entries).
	touched24 bool

	groups  io.ReaderAt // the tbl8 pool: group g at g*v4GroupBytes
	groupsW io.WriterAt
	dense   groupPool
	// fresh: groups allocated in the change being compiled (no half
	// points to them yet), with their contents until flush writes them.
	fresh map[uint32]*[v4Group]uint32

	// The sparse pool, kept as the tbl8 pool is.
	sparse  io.ReaderAt // sparse group g at g*sparseSize bytes
	sparseW io.WriterAt
	hosts   groupPool
	sfresh  map[uint32]*sparseGroup

	// depth[val slot] is the length+1 of the prefix rule with that slot, 0
	// for slots that are not IPv4 prefix rules: an entry's depth.
	depth []uint8
	// byLen[l] maps the masked address (host order) of each prefix of
	// length l to its val, for finding what a deleted prefix uncovers.
	// Made from built (the last full set) at the first change, since a
	// full load does not need it.
	byLen      [33]map[uint32]uint32
	byLenValid bool
	built      []v4Prefix
	count      int
	totalCost  int // sum of the prefixes' cost

	dirty24  []uint64 // a bit per page (v4Page entries) of tbl24
	allDirty bool
}

const v4Page = 1024 // tbl24 entries per dirty bit: 4 KiB

// A tbl24 entry with v4Ext set points to a group: a sparse group if
// v4Sparse is set too, else a tbl8 group; the group's number is in the
// bits of v4ID.
const (
	v4Sparse   = uint32(0x40000000)
	v4ID       = uint32(0x3fffffff)
	sparseMax  = int(gen.FastdropFdLayoutFD_V4SPARSE_MAX)
	sparseSize = int(gen.FastdropFdLayoutFD_V4SPARSE_SIZE) // struct fd_v4_sparse
	// Entries of a tbl8 group, and its bytes (a value of fd_v4_tbl8).
	v4Group      = int(gen.FastdropFdLayoutFD_V4GROUP)
	v4GroupBytes = v4Group * 4
)

func isDense(e uint32) bool  { return e&(v4Ext|v4Sparse) == v4Ext }
func isSparse(e uint32) bool { return e&(v4Ext|v4Sparse) == v4Ext|v4Sparse }

// sparseGroup is struct fd_v4_sparse.
type sparseGroup struct {
	def uint32 // the val of every address not listed
	n   int
	key [sparseMax]uint8
	val [sparseMax]uint32
}

func (s *sparseGroup) get(b uint8) uint32 {
	for i := range s.n {
		if s.key[i] == b {
			return s.val[i]
		}
	}
	return s.def
}

func (s *sparseGroup) add(b uint8, v uint32) {
	s.key[s.n], s.val[s.n] = b, v
	s.n++
}

func (s *sparseGroup) remove(b uint8) {
	for i := range s.n {
		if s.key[i] == b {
			s.n--
			s.key[i], s.val[i] = s.key[s.n], s.val[s.n]
			s.key[s.n], s.val[s.n] = 0, 0
			return
		}
	}
}

// Layout of struct fd_v4_sparse: def, n, key[sparseMax], a pad byte,
// val[sparseMax].
const sparseValOff = 8 + sparseMax + 1

func (s *sparseGroup) encode(b []byte) {
	binary.NativeEndian.PutUint32(b[0:], s.def)
	binary.NativeEndian.PutUint32(b[4:], uint32(s.n))
	copy(b[8:8+sparseMax], s.key[:])
	b[8+sparseMax] = 0
	for i, v := range s.val {
		binary.NativeEndian.PutUint32(b[sparseValOff+4*i:], v)
	}
}

func (s *sparseGroup) decode(b []byte) error {
	s.def = binary.NativeEndian.Uint32(b[0:])
	n := binary.NativeEndian.Uint32(b[4:])
	if n > uint32(sparseMax) {
		return fmt.Errorf("sparse group lists %d hosts, at most %d", n, sparseMax)
	}
	s.n = int(n)
	copy(s.key[:], b[8:8+sparseMax])
	for i := range s.val {
		s.val[i] = binary.NativeEndian.Uint32(b[sparseValOff+4*i:])
	}
	return nil
}

type readerWriterAt interface {
	io.ReaderAt
	io.WriterAt
}

// newV4Table makes an empty table whose tbl8 pool of maxGroups groups is
// read and written through groups, and sparse pool of maxSparse groups
// through sparse (the maps' memory, all zero).
func newV4Table(maxGroups, maxSparse, slots int, groups, sparse readerWriterAt) (*v4Table, error) {
	t := &v4Table{
		groups:  groups,
		groupsW: groups,
		dense:   newGroupPool(maxGroups, "IPv4 prefixes longer than /24 in more /24s than the tbl8 pool's"),
		fresh:   make(map[uint32]*[v4Group]uint32),
		sparse:  sparse,
		sparseW: sparse,
		hosts:   newGroupPool(maxSparse, "IPv4 host routes in more /24s than the sparse pool's"),
		sfresh:  make(map[uint32]*sparseGroup),
		depth:   make([]uint8, slots),
		dirty24: make([]uint64, tbl24Entries/v4Page/64),
	}
	var err error
	if t.mem24, err = newRegion(tbl24Entries * 4); err != nil {
		return nil, err
	}
	t.tbl24 = t.mem24.u32()
	return t, nil
}

// close releases the table's memory.
func (t *v4Table) close() error { return t.mem24.free() }

type v4Prefix struct {
	addr uint32 // host order, masked
	bits uint8
	val  uint32
}

func v4PrefixOf(p netip.Prefix, val uint32) v4Prefix {
	a := p.Addr().As4()
	return v4Prefix{addr: uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3]), bits: uint8(p.Bits()), val: val}
}

// cost is the number of table entries p covers.
func (p v4Prefix) cost() int {
	if p.bits <= 24 {
		return 1 << (24 - p.bits)
	}
	return v4Group
}

func fill(s []uint32, v uint32) {
	for i := range s {
		s[i] = v
	}
}

// needByLen makes byLen from built.
func (t *v4Table) needByLen() {
	if t.byLenValid {
		return
	}
	var n [33]int
	for _, p := range t.built {
		n[p.bits]++
	}
	for l := range t.byLen {
		t.byLen[l] = make(map[uint32]uint32, n[l])
	}
	for _, p := range t.built {
		t.byLen[p.bits][p.addr] = p.val
	}
	t.built = nil
	t.byLenValid = true
}

// build replaces the whole table with prefixes. The groups of the old
// table are retired, so the pool must hold both sets' groups.
func (t *v4Table) build(prefixes []v4Prefix) error {
	for _, e := range t.tbl24 {
		switch {
		case isDense(e):
			t.retire(e & v4ID)
		case isSparse(e):
			t.sretire(e & v4ID)
		}
	}
	if !t.touched24 {
		t.mem24.populate(0, tbl24Entries*4)
		t.touched24 = true
	} else {
		clear(t.tbl24)
	}
	clear(t.depth)
	t.count = len(prefixes)
	t.totalCost = 0
	for _, p := range prefixes {
		t.totalCost += p.cost()
	}
	t.allDirty = true
	t.built, t.byLenValid = prefixes, false

	// Prefixes up to /24 shortest first, so each overwrites what it
	// covers; then the longer ones /24 block by block, each block's group
	// made in one go from its tbl24 entry and written once.
	var short, long []v4Prefix
	for _, p := range prefixes {
		t.depth[valSlot(p.val)] = p.bits + 1
		if p.bits <= 24 {
			short = append(short, p)
		} else {
			long = append(long, p)
		}
	}
	// Sorting by length and address puts a prefix given twice next to
	// itself.
	slices.SortFunc(short, func(a, b v4Prefix) int {
		return cmp.Compare(uint64(a.bits)<<32|uint64(a.addr), uint64(b.bits)<<32|uint64(b.addr))
	})
	for i, p := range short {
		if i > 0 && short[i-1].bits == p.bits && short[i-1].addr == p.addr {
			return &dupPrefixError{v4String(p), short[i-1].val, p.val}
		}
		start := p.addr >> 8
		fill(t.tbl24[start:start+1<<(24-p.bits)], p.val)
	}
	slices.SortFunc(long, func(a, b v4Prefix) int {
		if c := cmp.Compare(a.addr>>8, b.addr>>8); c != 0 {
			return c
		}
		if c := cmp.Compare(a.bits, b.bits); c != 0 {
			return c
		}
		return cmp.Compare(a.addr, b.addr)
	})
	for i := 1; i < len(long); i++ {
		if long[i-1].bits == long[i].bits && long[i-1].addr == long[i].addr {
			return &dupPrefixError{v4String(long[i]), long[i-1].val, long[i].val}
		}
	}
	var g [v4Group]uint32
	// Sparse groups get consecutive numbers here: written in runs, as a
	// million 64-byte writes cost a quarter of a second.
	var run []byte
	var runStart uint32
	flushRun := func() error {
		if len(run) == 0 {
			return nil
		}
		if _, err := t.sparseW.WriteAt(run, int64(runStart)*int64(sparseSize)); err != nil {
			return fmt.Errorf("write sparse group: %w", err)
		}
		run = run[:0]
		return nil
	}
	for i := 0; i < len(long); {
		i24 := long[i].addr >> 8
		j, hosts := i, true
		for ; j < len(long) && long[j].addr>>8 == i24; j++ {
			hosts = hosts && long[j].bits == 32
		}
		if hosts && j-i <= sparseMax {
			s := sparseGroup{def: t.tbl24[i24]}
			for _, p := range long[i:j] {
				s.add(uint8(p.addr), p.val)
			}
			id, err := t.salloc()
			if err != nil {
				return err
			}
			if len(run) > 0 && (id != runStart+uint32(len(run)/sparseSize) || len(run) >= 1<<20) {
				if err := flushRun(); err != nil {
					return err
				}
			}
			if len(run) == 0 {
				runStart = id
			}
			run = append(run, make([]byte, sparseSize)...)
			s.encode(run[len(run)-sparseSize:])
			t.tbl24[i24] = v4Ext | v4Sparse | id
			i = j
			continue
		}
		fill(g[:], t.tbl24[i24])
		for _, p := range long[i:j] {
			start := p.addr & 0xff
			fill(g[start:start+1<<(32-p.bits)], p.val)
		}
		id, err := t.alloc()
		if err != nil {
			return err
		}
		if err := t.writeGroup(id, &g); err != nil {
			return err
		}
		t.tbl24[i24] = v4Ext | id
		i = j
	}
	return flushRun()
}

// groupPool hands out the numbers of a pool of groups shared by the halves
// and changed copy-on-write: a group a change replaces is retired, and
// free only once no half points to it (commit).
type groupPool struct {
	max     int
	free    []uint32 // lowest numbers last, so handed out first
	retired []uint32
	what    string // for the error when it is full
}

func newGroupPool(max int, what string) groupPool {
	p := groupPool{max: max, free: make([]uint32, max), what: what}
	for i := range p.free {
		p.free[i] = uint32(max - 1 - i)
	}
	return p
}

func (p *groupPool) alloc() (uint32, error) {
	n := len(p.free)
	if n == 0 {
		return 0, fmt.Errorf("%s %d groups hold (a change needs the old and the new set's): %w; %s", p.what, p.max, ErrCapacity, reloadAdvice)
	}
	g := p.free[n-1]
	p.free = p.free[:n-1]
	return g, nil
}

// release frees g at once: no half ever pointed to it.
func (p *groupPool) release(g uint32) { p.free = append(p.free, g) }

// retire frees g once the change commits.
func (p *groupPool) retire(g uint32) { p.retired = append(p.retired, g) }

func (p *groupPool) commit() {
	p.free = append(p.free, p.retired...)
	p.retired = p.retired[:0]
}

// live counts the groups in use.
func (p *groupPool) live() int { return p.max - len(p.free) - len(p.retired) }

// reset makes the groups marked in used the ones in use.
func (p *groupPool) reset(used []uint64) {
	p.free = p.free[:0]
	for g := p.max - 1; g >= 0; g-- {
		if used[g/64]&(1<<(g%64)) == 0 {
			p.free = append(p.free, uint32(g))
		}
	}
	p.retired = p.retired[:0]
}

func (t *v4Table) alloc() (uint32, error) { return t.dense.alloc() }

func (t *v4Table) retire(g uint32) {
	if _, ok := t.fresh[g]; ok {
		delete(t.fresh, g) // never seen by a half: free now
		t.dense.release(g)
		return
	}
	t.dense.retire(g)
}

func (t *v4Table) writeGroup(g uint32, b *[v4Group]uint32) error {
	if _, err := t.groupsW.WriteAt(u32Bytes(b[:]), int64(g)*int64(v4GroupBytes)); err != nil {
		return fmt.Errorf("write tbl8 group: %w", err)
	}
	return nil
}

func (t *v4Table) salloc() (uint32, error) { return t.hosts.alloc() }

func (t *v4Table) sretire(g uint32) {
	if _, ok := t.sfresh[g]; ok {
		delete(t.sfresh, g)
		t.hosts.release(g)
		return
	}
	t.hosts.retire(g)
}

func (t *v4Table) writeSparse(g uint32, s *sparseGroup) error {
	var b [sparseSize]byte
	s.encode(b[:])
	if _, err := t.sparseW.WriteAt(b[:], int64(g)*int64(sparseSize)); err != nil {
		return fmt.Errorf("write sparse group: %w", err)
	}
	return nil
}

// sparseOf returns the sparse group entry e points to, for reading.
func (t *v4Table) sparseOf(e uint32) (*sparseGroup, error) {
	g := e & v4ID
	if s, ok := t.sfresh[g]; ok {
		return s, nil
	}
	var b [sparseSize]byte
	if _, err := t.sparse.ReadAt(b[:], int64(g)*int64(sparseSize)); err != nil {
		return nil, fmt.Errorf("read sparse group: %w", err)
	}
	s := new(sparseGroup)
	if err := s.decode(b[:]); err != nil {
		return nil, err
	}
	return s, nil
}

// sparseFor returns the sparse group of /24 number i24 for changing, as
// group does for tbl8 groups. The entry must be sparse or plain; a plain
// entry gets a group with no hosts and the entry as def.
func (t *v4Table) sparseFor(i24 uint32) (*sparseGroup, error) {
	e := t.tbl24[i24]
	if isSparse(e) {
		if s, ok := t.sfresh[e&v4ID]; ok {
			return s, nil
		}
	}
	g, err := t.salloc()
	if err != nil {
		return nil, err
	}
	s := &sparseGroup{def: e}
	if isSparse(e) {
		old, err := t.sparseOf(e)
		if err != nil {
			t.hosts.release(g)
			return nil, err
		}
		*s = *old
		t.sretire(e & v4ID)
	}
	t.sfresh[g] = s
	t.tbl24[i24] = v4Ext | v4Sparse | g
	t.mark24(i24, i24+1)
	return s, nil
}

// group returns the contents of the group of /24 number i24 for changing:
// a fresh group, copied from the one there (or filled with the tbl24 entry
// if there is none), which the entry then points to.
func (t *v4Table) group(i24 uint32) (*[v4Group]uint32, error) {
	e := t.tbl24[i24]
	if isDense(e) {
		if b, ok := t.fresh[e&v4ID]; ok {
			return b, nil
		}
	}
	g, err := t.alloc()
	if err != nil {
		return nil, err
	}
	b := new([v4Group]uint32)
	switch {
	case isDense(e):
		old := e & v4ID
		if _, err := t.groups.ReadAt(u32Bytes(b[:]), int64(old)*int64(v4GroupBytes)); err != nil {
			t.dense.release(g)
			return nil, fmt.Errorf("read tbl8 group: %w", err)
		}
		t.retire(old)
	case isSparse(e):
		// The /24 now needs more than host routes: make it dense.
		s, err := t.sparseOf(e)
		if err != nil {
			t.dense.release(g)
			return nil, err
		}
		fill(b[:], s.def)
		for i := range s.n {
			b[s.key[i]] = s.val[i]
		}
		t.sretire(e & v4ID)
	default:
		fill(b[:], e)
	}
	t.fresh[g] = b
	t.tbl24[i24] = v4Ext | g
	t.mark24(i24, i24+1)
	return b, nil
}

// mark24 records that entries start to end changed: every write to tbl24
// is followed by it.
func (t *v4Table) mark24(start, end uint32) {
	// A later build must clear them (an untouched table is all zero).
	t.touched24 = true
	for p := start / v4Page; p <= (end-1)/v4Page; p++ {
		t.dirty24[p/64] |= 1 << (p % 64)
	}
}

func (t *v4Table) depthOf(val uint32) int {
	if val == 0 {
		return 0
	}
	return int(t.depth[valSlot(val)])
}

// insert adds one prefix, changing only the entries where it is now the
// longest match.
func (t *v4Table) insert(p v4Prefix) error {
	l := int(p.bits)
	d := l + 1
	t.needByLen()
	if v, ok := t.byLen[l][p.addr]; ok {
		return &dupPrefixError{v4String(p), v, p.val}
	}
	set := func(s []uint32) {
		for i, e := range s {
			if t.depthOf(e) <= d {
				s[i] = p.val
			}
		}
	}
	if l > 24 {
		i24 := p.addr >> 8
		e := t.tbl24[i24]
		host := false
		if l == 32 && !isDense(e) {
			host = true
			if isSparse(e) {
				s, err := t.sparseOf(e)
				if err != nil {
					return err
				}
				host = s.n < sparseMax
			}
		}
		if host {
			s, err := t.sparseFor(i24)
			if err != nil {
				return err
			}
			s.add(uint8(p.addr), p.val)
		} else {
			b, err := t.group(i24)
			if err != nil {
				return err // nothing changed
			}
			start := p.addr & 0xff
			set(b[start : start+1<<(32-l)])
		}
	} else {
		start := p.addr >> 8
		end := start + 1<<(24-l)
		for i := start; i < end; i++ {
			e := t.tbl24[i]
			switch {
			case isDense(e):
				b, err := t.group(i)
				if err != nil {
					return err
				}
				set(b[:])
			case isSparse(e):
				// Hosts are longer than p: only def can change, and
				// the group is copied only if it does.
				s, err := t.sparseOf(e)
				if err != nil {
					return err
				}
				if t.depthOf(s.def) <= d {
					if s, err = t.sparseFor(i); err != nil {
						return err
					}
					s.def = p.val
				}
			case t.depthOf(e) <= d:
				t.tbl24[i] = p.val
			}
		}
		t.mark24(start, end)
	}
	t.byLen[l][p.addr] = p.val
	t.depth[valSlot(p.val)] = uint8(d)
	t.count++
	t.totalCost += p.cost()
	return nil
}

// remove deletes one prefix: the entries it was the longest match for go
// to the next longest prefix covering it (or to 0).
func (t *v4Table) remove(p v4Prefix) error {
	l := int(p.bits)
	t.needByLen()
	delete(t.byLen[l], p.addr)
	t.depth[valSlot(p.val)] = 0
	t.count--
	t.totalCost -= p.cost()
	var parent uint32
	for pl := l - 1; pl >= 0; pl-- {
		if v, ok := t.byLen[pl][p.addr&maskV4(pl)]; ok {
			parent = v
			break
		}
	}
	replace := func(s []uint32) {
		for i, e := range s {
			if e == p.val {
				s[i] = parent
			}
		}
	}
	if l > 24 {
		i24 := p.addr >> 8
		e := t.tbl24[i24]
		if isSparse(e) {
			if l != 32 {
				return nil // a sparse group holds only hosts
			}
			s, err := t.sparseFor(i24)
			if err != nil {
				return err
			}
			s.remove(uint8(p.addr))
			if s.n == 0 {
				g := t.tbl24[i24] & v4ID
				t.tbl24[i24] = s.def
				t.mark24(i24, i24+1)
				t.sretire(g)
			}
			return nil
		}
		if !isDense(e) {
			return nil
		}
		b, err := t.group(i24)
		if err != nil {
			return err
		}
		start := p.addr & 0xff
		replace(b[start : start+1<<(32-l)])
		t.collapse(i24)
		return nil
	}
	start := p.addr >> 8
	end := start + 1<<(24-l)
	for i := start; i < end; i++ {
		e := t.tbl24[i]
		switch {
		case isDense(e):
			b, err := t.group(i)
			if err != nil {
				return err
			}
			replace(b[:])
			t.collapse(i)
		case isSparse(e):
			s, err := t.sparseOf(e)
			if err != nil {
				return err
			}
			if s.def == p.val {
				if s, err = t.sparseFor(i); err != nil {
					return err
				}
				s.def = parent
			}
		case e == p.val:
			t.tbl24[i] = parent
		}
	}
	t.mark24(start, end)
	return nil
}

// collapse turns /24 number i24 (whose tbl8 group is fresh) back into a
// plain entry if the group no longer holds anything longer than /24, or
// into a sparse group if all it holds longer than /24 is a few hosts.
func (t *v4Table) collapse(i24 uint32) {
	g := t.tbl24[i24] & v4ID
	b := t.fresh[g]
	var s sparseGroup
	def, hosts := uint32(0), 0
	for i, v := range b {
		switch d := t.depthOf(v); {
		case d == 33:
			if hosts == sparseMax {
				return
			}
			s.key[hosts], s.val[hosts] = uint8(i), v
			hosts++
		case d > 25:
			return // a /25-/31
		default:
			def = v // the same in every entry: prefixes of up to /24
		}
	}
	if hosts == 0 {
		t.tbl24[i24] = def
	} else {
		id, err := t.salloc()
		if err != nil {
			return // the sparse pool is full: stay a tbl8 group
		}
		s.def, s.n = def, hosts
		t.sfresh[id] = &s
		t.tbl24[i24] = v4Ext | v4Sparse | id
	}
	t.mark24(i24, i24+1)
	t.retire(g)
}

// flush writes the groups made by this change, before any half points to
// them.
func (t *v4Table) flush() error {
	for g, b := range t.fresh {
		if err := t.writeGroup(g, b); err != nil {
			return err
		}
	}
	clear(t.fresh)
	for g, s := range t.sfresh {
		if err := t.writeSparse(g, s); err != nil {
			return err
		}
	}
	clear(t.sfresh)
	return nil
}

// committed frees the groups the change replaced: no half points to them
// any more.
func (t *v4Table) committed() {
	t.dense.commit()
	t.hosts.commit()
	clear(t.dirty24)
	t.allDirty = false
}

func v4String(p v4Prefix) string {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(p.addr >> 24), byte(p.addr >> 16), byte(p.addr >> 8), byte(p.addr)}), int(p.bits)).String()
}

func maskV4(l int) uint32 {
	if l == 0 {
		return 0
	}
	return ^uint32(0) << (32 - l)
}

// lookup is what the program does, for tests.
func (t *v4Table) lookup(a uint32) uint32 {
	e := t.tbl24[a>>8]
	if isSparse(e) {
		s, err := t.sparseOf(e)
		if err != nil {
			return 0xffffffff
		}
		return s.get(uint8(a))
	}
	if e&v4Ext != 0 {
		g := e & v4ID
		if b, ok := t.fresh[g]; ok {
			return b[a&0xff]
		}
		var v [4]byte
		if _, err := t.groups.ReadAt(v[:], int64(g)*int64(v4GroupBytes)+int64(a&0xff)*4); err != nil {
			return 0xffffffff
		}
		e = uint32(v[0]) | uint32(v[1])<<8 | uint32(v[2])<<16 | uint32(v[3])<<24
	}
	return e
}

// liveGroups counts the tbl8 groups the table (this copy) points to.
func (t *v4Table) liveGroups() int { return t.dense.live() }

// liveSparse counts the sparse groups the table points to.
func (t *v4Table) liveSparse() int { return t.hosts.live() }

// forDirty calls fn for each run of dirty pages of tbl24 (as entry
// ranges), or the whole table if allDirty.
func (t *v4Table) forDirty(fn func(start, end int) error) error {
	if t.allDirty {
		return fn(0, tbl24Entries)
	}
	run := -1
	pages := tbl24Entries / v4Page
	for p := 0; p <= pages; p++ {
		d := p < pages && t.dirty24[p/64]&(1<<(p%64)) != 0
		switch {
		case d && run < 0:
			run = p
		case !d && run >= 0:
			if err := fn(run*v4Page, p*v4Page); err != nil {
				return err
			}
			run = -1
		}
	}
	return nil
}

// reload makes the table what the kernel's half holds: tbl24 read from
// half24 (this half's tbl24 in the map), and prefixes (the rule set's, with
// their vals) for the depths and what a change needs.
func (t *v4Table) reload(half24 io.ReaderAt, prefixes []v4Prefix) error {
	if !t.touched24 {
		t.mem24.populate(0, tbl24Entries*4)
		t.touched24 = true
	}
	if _, err := half24.ReadAt(u32Bytes(t.tbl24), 0); err != nil {
		return fmt.Errorf("read IPv4 prefix table: %w", err)
	}
	used := make([]uint64, (t.dense.max+63)/64)
	sused := make([]uint64, (t.hosts.max+63)/64)
	for _, e := range t.tbl24 {
		g := e & v4ID
		switch {
		case isDense(e):
			if int(g) >= t.dense.max {
				return errors.New("IPv4 prefix table points past the tbl8 pool")
			}
			used[g/64] |= 1 << (g % 64)
		case isSparse(e):
			if int(g) >= t.hosts.max {
				return errors.New("IPv4 prefix table points past the sparse pool")
			}
			sused[g/64] |= 1 << (g % 64)
		}
	}
	t.dense.reset(used)
	t.hosts.reset(sused)
	clear(t.fresh)
	clear(t.sfresh)
	clear(t.depth)
	for _, p := range prefixes {
		t.depth[valSlot(p.val)] = p.bits + 1
	}
	t.count = len(prefixes)
	t.totalCost = 0
	for _, p := range prefixes {
		t.totalCost += p.cost()
	}
	t.built, t.byLenValid = prefixes, false
	clear(t.dirty24)
	t.allDirty = false
	return nil
}

// change brings t from one rule set's prefixes to the next's: del out and
// add in, entry by entry, unless that costs more than building the table
// afresh from all() (the next set's prefixes). allDirty (the inactive
// half may not be a copy of the active one) makes every entry be written.
// what names the table in the errors for too many /24s with longer
// prefixes or host routes than groups and sparse, its two pools, hold
// (each pool serves both halves).
func (t *v4Table) change(add, del []v4Prefix, allDirty bool, groups, sparse int, what string, all func() []v4Prefix) error {
	// Changing entries in place costs more per entry than filling a fresh
	// table, but most changes touch a few entries of a big table.
	incrCost, fullCost := 0, tbl24Entries+t.totalCost
	// (An entry is a few ns; a prefix's own bookkeeping a few hundred.)
	for _, q := range add {
		incrCost += 2*q.cost() + 100
		fullCost += q.cost()
	}
	for _, q := range del {
		incrCost += 2*q.cost() + 100
		fullCost -= q.cost()
	}
	if incrCost > fullCost {
		if err := t.build(all()); err != nil {
			return err
		}
	} else {
		for _, q := range del {
			if err := t.remove(q); err != nil {
				return err
			}
		}
		for _, q := range add {
			if err := t.insert(q); err != nil {
				return err
			}
		}
	}
	if allDirty {
		t.allDirty = true
	}
	if n := t.liveGroups(); n > groups/2 {
		return fmt.Errorf("%s prefixes longer than /24 in %d different /24s: %w: the program was loaded with room for them in %d /24s; %s", what, n, ErrCapacity, groups/2, reloadAdvice)
	}
	if n := t.liveSparse(); n > sparse/2 {
		return fmt.Errorf("%s host routes in %d different /24s: %w: the program was loaded with room for host routes in %d /24s; %s", what, n, ErrCapacity, sparse/2, reloadAdvice)
	}
	return nil
}
