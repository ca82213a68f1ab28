package fastdrop

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
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
type v4Table struct {
	tbl24 []uint32 // tbl24Entries
	mem24 *region
	// touched24: tbl24 was populated (and may hold entries).
	touched24 bool

	groups    io.ReaderAt // the pool: group g at g*1024 bytes
	groupsW   io.WriterAt
	maxGroups int
	free      []uint32 // free groups
	// fresh: groups allocated in the change being compiled (no half
	// points to them yet), with their contents until flush writes them.
	fresh map[uint32]*[256]uint32
	// retired: groups the change replaced; free once both halves stop
	// pointing to them (commit), or back in use if the change is dropped.
	retired []uint32

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

// newV4Table makes an empty table whose tbl8 pool of maxGroups groups is
// read and written through groups (the map's memory, all zero).
func newV4Table(maxGroups, slots int, groups interface {
	io.ReaderAt
	io.WriterAt
}) (*v4Table, error) {
	t := &v4Table{
		groups:    groups,
		groupsW:   groups,
		maxGroups: maxGroups,
		fresh:     make(map[uint32]*[256]uint32),
		depth:     make([]uint8, slots),
		dirty24:   make([]uint64, tbl24Entries/v4Page/64),
	}
	var err error
	if t.mem24, err = newRegion(tbl24Entries * 4); err != nil {
		return nil, err
	}
	t.tbl24 = t.mem24.u32()
	t.free = make([]uint32, maxGroups)
	for i := range t.free {
		t.free[i] = uint32(maxGroups - 1 - i) // low numbers first
	}
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
	return 256
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
		if e&v4Ext != 0 {
			t.retire(e &^ v4Ext)
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
	var g [256]uint32
	for i := 0; i < len(long); {
		i24 := long[i].addr >> 8
		fill(g[:], t.tbl24[i24])
		j := i
		for ; j < len(long) && long[j].addr>>8 == i24; j++ {
			p := long[j]
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
	return nil
}

func (t *v4Table) alloc() (uint32, error) {
	n := len(t.free)
	if n == 0 {
		return 0, fmt.Errorf("IPv4 prefixes longer than /24 in more /24s than the pool's %d groups hold (a change needs the old and the new set's): %w (raise Options.IPv4Blocks)", t.maxGroups, ErrCapacity)
	}
	g := t.free[n-1]
	t.free = t.free[:n-1]
	return g, nil
}

func (t *v4Table) retire(g uint32) {
	if _, ok := t.fresh[g]; ok {
		delete(t.fresh, g) // never seen by a half: free now
		t.free = append(t.free, g)
		return
	}
	t.retired = append(t.retired, g)
}

func (t *v4Table) writeGroup(g uint32, b *[256]uint32) error {
	if _, err := t.groupsW.WriteAt(u32Bytes(b[:]), int64(g)*1024); err != nil {
		return fmt.Errorf("write tbl8 group: %w", err)
	}
	return nil
}

// group returns the contents of the group of /24 number i24 for changing:
// a fresh group, copied from the one there (or filled with the tbl24 entry
// if there is none), which the entry then points to.
func (t *v4Table) group(i24 uint32) (*[256]uint32, error) {
	e := t.tbl24[i24]
	if e&v4Ext != 0 {
		if b, ok := t.fresh[e&^v4Ext]; ok {
			return b, nil
		}
	}
	g, err := t.alloc()
	if err != nil {
		return nil, err
	}
	b := new([256]uint32)
	if e&v4Ext != 0 {
		old := e &^ v4Ext
		if _, err := t.groups.ReadAt(u32Bytes(b[:]), int64(old)*1024); err != nil {
			t.free = append(t.free, g)
			return nil, fmt.Errorf("read tbl8 group: %w", err)
		}
		t.retire(old)
	} else {
		fill(b[:], e)
	}
	t.fresh[g] = b
	t.tbl24[i24] = v4Ext | g
	t.mark24(i24, i24+1)
	return b, nil
}

func (t *v4Table) mark24(start, end uint32) {
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
		b, err := t.group(p.addr >> 8)
		if err != nil {
			return err // nothing changed
		}
		start := p.addr & 0xff
		set(b[start : start+1<<(32-l)])
	} else {
		start := p.addr >> 8
		end := start + 1<<(24-l)
		for i := start; i < end; i++ {
			e := t.tbl24[i]
			if e&v4Ext != 0 {
				b, err := t.group(i)
				if err != nil {
					return err
				}
				set(b[:])
			} else if t.depthOf(e) <= d {
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
		if t.tbl24[i24]&v4Ext == 0 {
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
		if e&v4Ext != 0 {
			b, err := t.group(i)
			if err != nil {
				return err
			}
			replace(b[:])
			t.collapse(i)
		} else if e == p.val {
			t.tbl24[i] = parent
		}
	}
	t.mark24(start, end)
	return nil
}

// collapse turns /24 number i24 (whose group is fresh) back into a plain
// entry if the group no longer holds anything longer than /24.
func (t *v4Table) collapse(i24 uint32) {
	g := t.tbl24[i24] &^ v4Ext
	b := t.fresh[g]
	for _, v := range b {
		if v != b[0] || t.depthOf(v) > 25 {
			return
		}
	}
	t.tbl24[i24] = b[0]
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
	return nil
}

// committed frees the groups the change replaced: no half points to them
// any more.
func (t *v4Table) committed() {
	t.free = append(t.free, t.retired...)
	t.retired = t.retired[:0]
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
	if e&v4Ext != 0 {
		g := e &^ v4Ext
		if b, ok := t.fresh[g]; ok {
			return b[a&0xff]
		}
		var v [4]byte
		if _, err := t.groups.ReadAt(v[:], int64(g)*1024+int64(a&0xff)*4); err != nil {
			return 0xffffffff
		}
		e = uint32(v[0]) | uint32(v[1])<<8 | uint32(v[2])<<16 | uint32(v[3])<<24
	}
	return e
}

// liveGroups counts the groups the table (this copy) points to.
func (t *v4Table) liveGroups() int {
	return t.maxGroups - len(t.free) - len(t.retired)
}

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
	used := make([]uint64, (t.maxGroups+63)/64)
	for _, e := range t.tbl24 {
		if e&v4Ext != 0 {
			g := e &^ v4Ext
			if int(g) >= t.maxGroups {
				return errors.New("IPv4 prefix table points past the tbl8 pool")
			}
			used[g/64] |= 1 << (g % 64)
		}
	}
	t.free = t.free[:0]
	for g := t.maxGroups - 1; g >= 0; g-- {
		if used[g/64]&(1<<(g%64)) == 0 {
			t.free = append(t.free, uint32(g))
		}
	}
	clear(t.fresh)
	t.retired = t.retired[:0]
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
