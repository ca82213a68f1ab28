package fastdrop

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"net/netip"
	"slices"
)

// v6Table is the IPv6 prefix table: binary search on prefix lengths
// (Waldvogel, Varghese, Turner and Plattner 1997) over one open-addressing
// hash table of (prefix, length) entries.
//
// The distinct lengths form a balanced binary search tree. Looking up an
// address probes the length at the root; a hit goes on to longer lengths,
// a miss to shorter ones. So that a hit at a short length can promise
// something longer, every prefix leaves a marker at each length where the
// search towards its own length turns to longer ones, and every marker
// carries the longest prefix rule that contains it (its "best matching
// prefix"), which is the answer if the search finds nothing longer. With k
// distinct lengths a lookup costs at most ceil(log2(k+1)) probes: 7 for
// every length from /1 to /128.
//
// The hash table uses linear probing with Robin Hood insertion (an entry
// farther from its home takes the slot of one nearer to its own), at a load
// factor of at most 3/4: probe sequences stay short and even, and a search
// for an absent key stops at the first entry nearer its home than the key
// would be. No key sits more than FD_V6_PROBES slots from its home; if one
// would, the table is rebuilt with another seed or twice the size.
type v6Table struct {
	capacity int // entries per half (a power of two)
	size     int // entries in use (a power of two)
	seed     uint64
	buf      []byte // size entries of v6EntSize bytes, as in the map
	mem      *region
	used     int // bytes of mem that may be non-zero
	tree     [256]uint8
	def      uint32 // val of ::/0
	count    int    // prefix rules
	entries  int
}

type v6Prefix struct {
	hi, lo uint64 // big-endian halves of the masked address
	bits   uint8
	val    uint32
}

func v6PrefixOf(p netip.Prefix, val uint32) v6Prefix {
	a := p.Addr().As16()
	return v6Prefix{
		hi:   binary.BigEndian.Uint64(a[:8]),
		lo:   binary.BigEndian.Uint64(a[8:]),
		bits: uint8(p.Bits()),
		val:  val,
	}
}

func newV6Table(capacity int) (*v6Table, error) {
	mem, err := newRegion(capacity * v6EntSize)
	if err != nil {
		return nil, err
	}
	return &v6Table{capacity: capacity, mem: mem}, nil
}

func (t *v6Table) close() error { return t.mem.free() }

// mask128 keeps the first l bits of (hi, lo).
func mask128(hi, lo uint64, l int) (uint64, uint64) {
	switch {
	case l == 0:
		return 0, 0
	case l < 64:
		return hi & (^uint64(0) << (64 - l)), 0
	case l == 64:
		return hi, 0
	case l < 128:
		return hi, lo & (^uint64(0) << (128 - l))
	}
	return hi, lo
}

// v6Hash is fd_v6_hash: hi and lo as the program loads them (the
// address's bytes read little-endian).
func v6Hash(hi, lo, l, seed uint64) uint64 {
	return (hi^seed)*0x9e3779b97f4a7c15 + (lo^l<<56)*0xc2b2ae3d27d4eb4f
}

const (
	v6FlagUsed   = uint8(1)
	v6FlagMarker = uint8(2)
	v6FlagPrefix = uint8(4)
)

// build replaces the table with prefixes (which it sorts).
func (t *v6Table) build(prefixes []v6Prefix) error {
	t.def = 0
	t.count = len(prefixes)
	t.tree = [256]uint8{}
	var lens []int
	var seenLen [129]bool
	rest := prefixes[:0:0]
	for _, p := range prefixes {
		if p.bits == 0 {
			if t.def != 0 {
				return &dupPrefixError{"::/0", t.def, p.val}
			}
			t.def = p.val
			continue
		}
		if !seenLen[p.bits] {
			seenLen[p.bits] = true
			lens = append(lens, int(p.bits))
		}
		rest = append(rest, p)
	}
	slices.Sort(lens)
	var weight [129]int
	for _, p := range rest {
		weight[p.bits]++
	}
	t.tree = lengthTree(lens, weight[:])

	// Address order, shorter first among equal addresses: then the
	// prefixes containing p are exactly the stack left when p comes.
	slices.SortFunc(rest, func(a, b v6Prefix) int {
		if c := cmp.Compare(a.hi, b.hi); c != 0 {
			return c
		}
		if c := cmp.Compare(a.lo, b.lo); c != 0 {
			return c
		}
		return cmp.Compare(a.bits, b.bits)
	})

	// Entries: the prefixes and at most one marker per right turn on each
	// prefix's path (markers of prefixes with a common start coincide).
	entries := len(rest)
	for i := range rest {
		for node := 1; node < 256 && t.tree[node] != 0 && t.tree[node] != rest[i].bits; {
			if t.tree[node] < rest[i].bits {
				entries++
				node = 2*node + 1
			} else {
				node = 2 * node
			}
		}
	}
	size := 1024
	for 3*size < 4*entries && size < t.capacity {
		size *= 2
	}
	if size > t.capacity {
		size = t.capacity
	}
	seed := t.seed
	if seed == 0 {
		seed = 0x5bd1e9955bd1e995
	}
	for attempt := 0; ; attempt++ {
		err := t.fill(rest, size, seed)
		if err == nil {
			return nil
		}
		var dup *dupPrefixError
		if errors.As(err, &dup) {
			return err
		}
		switch {
		case size*2 <= t.capacity:
			size *= 2
		case attempt < 8:
			seed = seed*0x2545f4914f6cdd1d + 1
		default:
			return fmt.Errorf("IPv6 prefixes and their markers do not fit %d table entries: %w; %s", t.capacity, ErrCapacity, reloadAdvice)
		}
	}
}

var errV6Full = fmt.Errorf("v6 table too full")

// lengthTree lays out the search tree over the sorted distinct lengths
// lens, at most 8 levels deep (the program's FD_V6_DEPTH), as an implicit
// heap: node n has children 2n and 2n+1. Of all such trees it picks one
// with the fewest probes for a lookup that ends at a prefix, weighting
// each length by its number of prefixes (weight[l]): an optimal binary
// search tree (Knuth 1971) under a height limit. The common lengths go
// near the root, so most lookups end after a probe or two, and they need
// fewer markers (a prefix leaves one wherever its path turns to longer
// lengths).
func lengthTree(lens []int, weight []int) [256]uint8 {
	const depth = 8
	n := len(lens)
	var tree [256]uint8
	if n == 0 {
		return tree
	}
	prefix := make([]int, n+1) // prefix[i] = weight of lens[:i]
	for i, l := range lens {
		prefix[i+1] = prefix[i] + weight[l] + 1 // +1: every length costs something
	}
	// cost[d][i][j]: least total weighted depth of lens[i:j] in a tree of
	// depth <= d; root[d][i][j]: its root. Empty ranges cost 0.
	const inf = int(^uint(0) >> 2)
	cost := make([][][]int, depth+1)
	root := make([][][]int8, depth+1)
	for d := range cost {
		cost[d] = make([][]int, n+1)
		root[d] = make([][]int8, n+1)
		for i := range cost[d] {
			cost[d][i] = make([]int, n+1)
			root[d][i] = make([]int8, n+1)
			for j := i + 1; j <= n; j++ {
				cost[d][i][j] = inf
			}
		}
	}
	for d := 1; d <= depth; d++ {
		for size := 1; size <= n && size < 1<<d; size++ {
			for i := 0; i+size <= n; i++ {
				j := i + size
				best, arg := inf, -1
				for k := i; k < j; k++ {
					l, r := cost[d-1][i][k], cost[d-1][k+1][j]
					if l == inf || r == inf {
						continue
					}
					if c := l + r; c < best {
						best, arg = c, k
					}
				}
				// Every length in the range is one level below this root.
				cost[d][i][j], root[d][i][j] = best+prefix[j]-prefix[i], int8(arg)
			}
		}
	}
	var lay func(node, d, i, j int)
	lay = func(node, d, i, j int) {
		if i >= j {
			return
		}
		k := int(root[d][i][j])
		tree[node] = uint8(lens[k])
		lay(2*node, d-1, i, k)
		lay(2*node+1, d-1, k+1, j)
	}
	lay(1, depth, 0, n)
	return tree
}

func (t *v6Table) fill(sorted []v6Prefix, size int, seed uint64) error {
	t.size = size
	t.seed = seed
	n := size * v6EntSize
	clear(t.mem.b[:min(t.used, n)])
	if n > t.used {
		t.mem.populate(t.used, n-t.used)
		t.used = n
	}
	t.buf = t.mem.b[:n]
	t.entries = 0
	var stack []*v6Prefix
	for i := range sorted {
		p := &sorted[i]
		for len(stack) > 0 && !v6Contains(stack[len(stack)-1], p) {
			stack = stack[:len(stack)-1]
		}
		if i > 0 && sorted[i-1].hi == p.hi && sorted[i-1].lo == p.lo && sorted[i-1].bits == p.bits {
			var a [16]byte
			binary.BigEndian.PutUint64(a[:8], p.hi)
			binary.BigEndian.PutUint64(a[8:], p.lo)
			return &dupPrefixError{netip.PrefixFrom(netip.AddrFrom16(a), int(p.bits)).String(), sorted[i-1].val, p.val}
		}
		if err := t.upsert(p.hi, p.lo, int(p.bits), p.val, v6FlagPrefix); err != nil {
			return err
		}
		// Markers where the search for p's length turns to longer lengths.
		for node := 1; node < 256 && t.tree[node] != 0; {
			m := int(t.tree[node])
			if m == int(p.bits) {
				break
			}
			if m > int(p.bits) {
				node = 2 * node
				continue
			}
			var bmp uint32
			for j := len(stack) - 1; j >= 0; j-- {
				if int(stack[j].bits) <= m {
					bmp = stack[j].val
					break
				}
			}
			if bmp == 0 {
				bmp = t.def
			}
			mh, ml := mask128(p.hi, p.lo, m)
			if err := t.upsert(mh, ml, m, bmp, v6FlagMarker); err != nil {
				return err
			}
			node = 2*node + 1
		}
		stack = append(stack, p)
	}
	return nil
}

func v6Contains(outer, inner *v6Prefix) bool {
	if outer.bits > inner.bits {
		return false
	}
	h, l := mask128(inner.hi, inner.lo, int(outer.bits))
	return h == outer.hi && l == outer.lo
}

// upsert adds an entry, or adds flags to an existing one. A prefix entry
// sets its val; a marker keeps the val already there (a prefix's own, or
// the same best match computed by another prefix).
func (t *v6Table) upsert(hiBE, loBE uint64, l int, val uint32, flag uint8) error {
	hi, lo := bits.ReverseBytes64(hiBE), bits.ReverseBytes64(loBE)
	mask := t.size - 1
	shift := 64 - bits.TrailingZeros(uint(t.size))
	idx := int(v6Hash(hi, lo, uint64(l), t.seed) >> shift)
	le := binary.LittleEndian
	// Find it: entries along the run are ordered by distance from home.
	d := 0
	for ; d < v6Probes; d++ {
		e := t.buf[((idx+d)&mask)*v6EntSize:][:v6EntSize]
		if e[21]&v6FlagUsed == 0 || int(e[22]) < d {
			break
		}
		if le.Uint64(e[0:]) == hi && le.Uint64(e[8:]) == lo && int(e[20]) == l {
			if flag == v6FlagPrefix {
				le.PutUint32(e[16:], val)
			}
			e[21] |= flag
			return nil
		}
	}
	if 4*(t.entries+1) > 3*t.size {
		return errV6Full
	}
	// Insert at d, pushing richer entries down the run.
	var cur [v6EntSize]byte
	le.PutUint64(cur[0:], hi)
	le.PutUint64(cur[8:], lo)
	le.PutUint32(cur[16:], val)
	cur[20] = uint8(l)
	cur[21] = v6FlagUsed | flag
	for ; d < v6Probes; d++ {
		e := t.buf[((idx+d)&mask)*v6EntSize:][:v6EntSize]
		cur[22] = uint8(d)
		if e[21]&v6FlagUsed == 0 {
			copy(e, cur[:])
			t.entries++
			return nil
		}
		if int(e[22]) < d {
			// Swap: the displaced entry continues from its own
			// distance.
			var tmp [v6EntSize]byte
			copy(tmp[:], e)
			copy(e, cur[:])
			cur = tmp
			idx = (idx + d) - int(cur[22]) // its home
			d = int(cur[22])
		}
	}
	return errV6Full
}

// lookup is what the program does, for tests: a is the address.
func (t *v6Table) lookup(a netip.Addr) uint32 {
	b := a.As16()
	hiBE, loBE := binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])
	best, node := t.def, 1
	for d := 0; d < 8 && node < 256; d++ {
		l := int(t.tree[node])
		if l == 0 {
			break
		}
		mh, ml := mask128(hiBE, loBE, l)
		val, flags, ok := t.probe(bits.ReverseBytes64(mh), bits.ReverseBytes64(ml), l)
		if !ok {
			node = 2 * node
			continue
		}
		if val != 0 {
			best = val
		}
		if flags&v6FlagMarker == 0 {
			break
		}
		node = 2*node + 1
	}
	return best
}

func (t *v6Table) probe(hi, lo uint64, l int) (uint32, uint8, bool) {
	if t.size == 0 {
		return 0, 0, false
	}
	mask := t.size - 1
	shift := 64 - bits.TrailingZeros(uint(t.size))
	home := int(v6Hash(hi, lo, uint64(l), t.seed) >> shift)
	le := binary.LittleEndian
	for j := range v6Probes {
		e := t.buf[((home+j)&mask)*v6EntSize:][:v6EntSize]
		if e[21]&v6FlagUsed == 0 || int(e[22]) < j {
			return 0, 0, false
		}
		if le.Uint64(e[0:]) == hi && le.Uint64(e[8:]) == lo && int(e[20]) == l {
			return le.Uint32(e[16:]), e[21], true
		}
	}
	return 0, 0, false
}

// shift is fd_conf.v6_shift.
func (t *v6Table) shift() uint32 {
	if t.size == 0 {
		return 0
	}
	return uint32(64 - bits.TrailingZeros(uint(t.size)))
}
