package fastdrop

import (
	"cmp"
	"encoding/binary"
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
// The hash table uses linear probing at a load factor of at most 1/2 and
// never lets a key sit more than FD_V6_PROBES slots from its home; if one
// would, the table is rebuilt with another seed or twice the size.
type v6Table struct {
	capacity int // entries per half (a power of two)
	size     int // entries in use (a power of two)
	seed     uint64
	buf      []byte // size entries of v6EntSize bytes, as in the map
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

func newV6Table(capacity int) *v6Table {
	return &v6Table{capacity: capacity}
}

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
	x := (hi ^ seed) * 0x9e3779b97f4a7c15
	x = (x ^ (x >> 32) ^ lo) * 0xc2b2ae3d27d4eb4f
	x = (x ^ (x >> 29) ^ l) * 0x165667b19e3779f9
	return x ^ (x >> 32)
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
	var fillTree func(node, lo, hi int)
	fillTree = func(node, lo, hi int) {
		if lo > hi || node > 255 {
			return
		}
		mid := (lo + hi + 1) / 2
		t.tree[node] = uint8(lens[mid])
		fillTree(2*node, lo, mid-1)
		fillTree(2*node+1, mid+1, hi)
	}
	fillTree(1, 0, len(lens)-1)

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

	size := 1024
	for size < 4*len(rest) && size < t.capacity {
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
		switch {
		case size*2 <= t.capacity:
			size *= 2
		case attempt < 8:
			seed = seed*0x2545f4914f6cdd1d + 1
		default:
			return fmt.Errorf("IPv6 prefixes and their markers do not fit %d table entries: %w (raise Options.IPv6Entries)", t.capacity, ErrCapacity)
		}
	}
}

var errV6Full = fmt.Errorf("v6 table too full")

func (t *v6Table) fill(sorted []v6Prefix, size int, seed uint64) error {
	t.size = size
	t.seed = seed
	if cap(t.buf) >= size*v6EntSize {
		t.buf = t.buf[:size*v6EntSize]
		clear(t.buf)
	} else {
		t.buf = make([]byte, size*v6EntSize)
	}
	t.entries = 0
	var stack []*v6Prefix
	for i := range sorted {
		p := &sorted[i]
		for len(stack) > 0 && !v6Contains(stack[len(stack)-1], p) {
			stack = stack[:len(stack)-1]
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
	home := int(v6Hash(hi, lo, uint64(l), t.seed) >> shift)
	le := binary.LittleEndian
	for j := range v6Probes {
		e := t.buf[((home+j)&mask)*v6EntSize:][:v6EntSize]
		if e[21]&v6FlagUsed == 0 {
			if 2*(t.entries+1) > t.size {
				return errV6Full
			}
			t.entries++
			le.PutUint64(e[0:], hi)
			le.PutUint64(e[8:], lo)
			le.PutUint32(e[16:], val)
			e[20] = uint8(l)
			e[21] = v6FlagUsed | flag
			return nil
		}
		if le.Uint64(e[0:]) == hi && le.Uint64(e[8:]) == lo && int(e[20]) == l {
			if flag == v6FlagPrefix {
				le.PutUint32(e[16:], val)
			}
			e[21] |= flag
			return nil
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
		if e[21]&v6FlagUsed == 0 {
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
