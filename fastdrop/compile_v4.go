package fastdrop

import (
	"errors"
	"fmt"
	"math/bits"
	"net/netip"
)

// v4Table is the IPv4 prefix table as DIR-24-8 (Gupta, Lin and McKeown
// 1998; DPDK's rte_lpm): tbl24 holds, for each /24, the val of the longest
// prefix of length <= 24 covering it, or (bit 31) the number of a tbl8
// group of 256 entries that resolves the last 8 bits. A lookup is one read,
// or two for /24s that hold longer prefixes.
//
// This Go copy is the truth; the kernel's two halves are copies of it,
// written page by page where it changed (dirty), so that a single rule
// change writes a few KiB, not the 64 MiB table.
type v4Table struct {
	tbl24     []uint32 // tbl24Entries
	tbl8      []uint32 // groups in use * 256
	maxGroups int
	free      []uint32 // groups below len(tbl8)/256 that are free

	mem24, mem8 *region
	touched24   bool // tbl24 is populated (and may hold entries)
	populated8  int  // tbl8 entries populated

	// bits[val slot] is the length+1 of the prefix rule with that slot,
	// 0 for slots that are not IPv4 prefix rules: an entry's depth.
	depth []uint8
	// byLen[l] maps the masked address (host order) of each prefix of
	// length l to its val, for finding what a deleted prefix uncovers.
	// Made from built (what build was given) at the first change, since a
	// full load does not need it.
	byLen      [33]map[uint32]uint32
	byLenValid bool
	built      []v4Prefix
	count      int

	dirty24  []uint64 // a bit per page (v4Page entries) of tbl24
	dirty8   []uint64 // a bit per tbl8 group
	allDirty bool
}

const v4Page = 1024 // tbl24 entries per dirty bit: 4 KiB

func newV4Table(maxGroups, slots int) (*v4Table, error) {
	t := &v4Table{
		maxGroups: maxGroups,
		depth:     make([]uint8, slots),
		dirty24:   make([]uint64, tbl24Entries/v4Page/64),
		dirty8:    make([]uint64, (maxGroups+63)/64),
	}
	var err error
	if t.mem24, err = newRegion(tbl24Entries * 4); err != nil {
		return nil, err
	}
	if t.mem8, err = newRegion(maxGroups * 1024); err != nil {
		return nil, errors.Join(err, t.mem24.free())
	}
	t.tbl24 = t.mem24.u32()
	t.tbl8 = t.mem8.u32()[:0]
	return t, nil
}

// needByLen makes byLen from what build was given.
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

// close releases the table's memory.
func (t *v4Table) close() error {
	return errors.Join(t.mem24.free(), t.mem8.free())
}

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

// build replaces the whole table with prefixes.
func (t *v4Table) build(prefixes []v4Prefix) error {
	if !t.touched24 {
		t.mem24.populate(0, tbl24Entries*4)
		t.touched24 = true
	} else {
		clear(t.tbl24)
	}
	clear(t.tbl8)
	t.tbl8 = t.tbl8[:0]
	t.free = t.free[:0]
	clear(t.depth)
	t.count = 0
	t.allDirty = true

	// Shortest first: then every insert simply overwrites what it covers,
	// and a new tbl8 group starts as the /24 entry it replaces.
	var n [33]int
	for _, p := range prefixes {
		n[p.bits]++
	}
	var byLen [33][]v4Prefix
	for l := range byLen {
		byLen[l] = make([]v4Prefix, 0, n[l])
	}
	for _, p := range prefixes {
		byLen[p.bits] = append(byLen[p.bits], p)
	}
	t.built, t.byLenValid = prefixes, false
	for l := range byLen {
		for _, p := range byLen[l] {
			t.depth[valSlot(p.val)] = uint8(l) + 1
			t.count++
			if l <= 24 {
				start := p.addr >> 8
				end := start + 1<<(24-l)
				fill(t.tbl24[start:end], p.val)
				continue
			}
			g, err := t.group(p.addr >> 8)
			if err != nil {
				return err
			}
			start := p.addr & 0xff
			fill(t.tbl8[g*256+start:g*256+start+1<<(32-l)], p.val)
		}
	}
	return nil
}

func fill(s []uint32, v uint32) {
	for i := range s {
		s[i] = v
	}
}

// group returns the tbl8 group of /24 number i24, making one (filled with
// the tbl24 entry it replaces) if there is none.
func (t *v4Table) group(i24 uint32) (uint32, error) {
	e := t.tbl24[i24]
	if e&v4Ext != 0 {
		return e &^ v4Ext, nil
	}
	var g uint32
	if n := len(t.free); n > 0 {
		g = t.free[n-1]
		t.free = t.free[:n-1]
	} else {
		if len(t.tbl8)/256 >= t.maxGroups {
			return 0, fmt.Errorf("IPv4 prefixes longer than /24 in more than %d different /24s: %w (raise Options.IPv4Blocks)", t.maxGroups, ErrCapacity)
		}
		g = uint32(len(t.tbl8) / 256)
		if n := len(t.tbl8) + 256; n > t.populated8 {
			step := min(max(t.populated8, 1<<20), t.maxGroups*256-t.populated8) // entries
			t.mem8.populate(t.populated8*4, step*4)
			t.populated8 += step
		}
		t.tbl8 = t.tbl8[:len(t.tbl8)+256]
	}
	fill(t.tbl8[g*256:g*256+256], e)
	t.tbl24[i24] = v4Ext | g
	t.markGroup(g)
	t.mark24(i24, i24+1)
	return g, nil
}

func (t *v4Table) mark24(start, end uint32) {
	for p := start / v4Page; p <= (end-1)/v4Page; p++ {
		t.dirty24[p/64] |= 1 << (p % 64)
	}
}

func (t *v4Table) markGroup(g uint32) { t.dirty8[g/64] |= 1 << (g % 64) }

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
	var g uint32
	if l > 24 {
		var err error
		if g, err = t.group(p.addr >> 8); err != nil {
			return err // nothing changed
		}
	}
	t.needByLen()
	t.byLen[l][p.addr] = p.val
	t.depth[valSlot(p.val)] = uint8(l) + 1
	t.count++
	d := l + 1
	set := func(s []uint32) bool {
		changed := false
		for i, e := range s {
			if t.depthOf(e) <= d {
				s[i] = p.val
				changed = true
			}
		}
		return changed
	}
	if l <= 24 {
		start := p.addr >> 8
		end := start + 1<<(24-l)
		for i := start; i < end; i++ {
			e := t.tbl24[i]
			if e&v4Ext != 0 {
				g := e &^ v4Ext
				if set(t.tbl8[g*256 : g*256+256]) {
					t.markGroup(g)
				}
			} else if t.depthOf(e) <= d {
				t.tbl24[i] = p.val
			}
		}
		t.mark24(start, end)
		return nil
	}
	start := g*256 + p.addr&0xff
	set(t.tbl8[start : start+1<<(32-l)])
	t.markGroup(g)
	return nil
}

// remove deletes one prefix: the entries it was the longest match for go
// to the next longest prefix covering it (or to 0).
func (t *v4Table) remove(p v4Prefix) {
	l := int(p.bits)
	t.needByLen()
	delete(t.byLen[l], p.addr)
	t.depth[valSlot(p.val)] = 0
	t.count--
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
	if l <= 24 {
		start := p.addr >> 8
		end := start + 1<<(24-l)
		for i := start; i < end; i++ {
			e := t.tbl24[i]
			if e&v4Ext != 0 {
				g := e &^ v4Ext
				replace(t.tbl8[g*256 : g*256+256])
				t.markGroup(g)
				t.collapse(i)
			} else if e == p.val {
				t.tbl24[i] = parent
			}
		}
		t.mark24(start, end)
		return
	}
	i24 := p.addr >> 8
	if e := t.tbl24[i24]; e&v4Ext != 0 {
		g := e &^ v4Ext
		start := g*256 + p.addr&0xff
		replace(t.tbl8[start : start+1<<(32-l)])
		t.markGroup(g)
		t.collapse(i24)
	}
}

// collapse turns /24 number i24 back into a plain entry if its group no
// longer holds anything longer than /24, and frees the group.
func (t *v4Table) collapse(i24 uint32) {
	e := t.tbl24[i24]
	if e&v4Ext == 0 {
		return
	}
	g := e &^ v4Ext
	s := t.tbl8[g*256 : g*256+256]
	for _, v := range s {
		if v != s[0] || t.depthOf(v) > 25 {
			return
		}
	}
	t.tbl24[i24] = s[0]
	t.mark24(i24, i24+1)
	t.free = append(t.free, g)
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
		e = t.tbl8[(e&^v4Ext)*256+a&0xff]
	}
	return e
}

// groupsUsed is the number of tbl8 groups to copy to the kernel.
func (t *v4Table) groupsUsed() int { return len(t.tbl8) / 256 }

// dirtyRuns calls fn for each run of dirty pages of tbl24 (as entry
// ranges) and each dirty group, or everything if allDirty.
func (t *v4Table) forDirty(fn24 func(start, end int) error, fn8 func(g int) error) error {
	if t.allDirty {
		if err := fn24(0, tbl24Entries); err != nil {
			return err
		}
		for g := range t.groupsUsed() {
			if err := fn8(g); err != nil {
				return err
			}
		}
		return nil
	}
	run := -1
	pages := tbl24Entries / v4Page
	for p := 0; p <= pages; p++ {
		d := p < pages && t.dirty24[p/64]&(1<<(p%64)) != 0
		switch {
		case d && run < 0:
			run = p
		case !d && run >= 0:
			if err := fn24(run*v4Page, p*v4Page); err != nil {
				return err
			}
			run = -1
		}
	}
	for w, word := range t.dirty8 {
		for word != 0 {
			b := bits.TrailingZeros64(word)
			word &^= 1 << b
			if g := w*64 + b; g < t.groupsUsed() {
				if err := fn8(g); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func (t *v4Table) clearDirty() {
	clear(t.dirty24)
	clear(t.dirty8)
	t.allDirty = false
}
