package fastdrop

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// The numeric fields (sport, dport, port, len, ttl, dscp, type, code,
// queue) share one value type, Num, one parser and one printer: a value,
// a range, a comparison, a list of them, or a negated list (FlowSpec's
// numeric operators, RFC 8955 4.2.1.1, all evaluate to such a set). Each
// field is a numSpec (its name, its values' width, its names of values)
// and a numField entry of matchFields. The classifiers need nothing of
// their own for lists: a field's direct table is filled from the values
// a rule allows (Num.spans), however they were written.

// MaxListItems is the most items one numeric field's list may have.
const MaxListItems = 32

// NumItem is one item of a numeric field's value: the values Lo to Hi,
// inclusive. Op is how it was written: CmpRange for N (Lo == Hi) or
// LO-HI; a comparison (>N, >=N, <N, <=N) keeps the range it leaves of the
// field's values (ttl <3 is 0-2 with CmpLT, len >1024 is 1025 to the
// largest length with CmpGT). Named: written by its name (dscp ef, icmp
// type echo-request), which String writes back; Lo == Hi.
type NumItem struct {
	Lo, Hi uint32
	Op     CmpOp
	Named  bool
	Hex    bool // written in hexadecimal (flowlabel 0x12345)
}

// Num is a numeric field's value: a frame's value matches if it is in
// one of Items, or with Not if it is in none of them. No Items: the field
// is not set.
type Num struct {
	Items []NumItem
	Not   bool
}

// NumRange returns the Num of the one range lo-hi (a value if lo == hi).
func NumRange(lo, hi uint32) Num { return Num{Items: []NumItem{{Lo: lo, Hi: hi, Op: CmpRange}}} }

// IsSet reports whether the field has a value.
func (n *Num) IsSet() bool { return len(n.Items) > 0 }

// Contains reports whether v matches n.
func (n *Num) Contains(v uint32) bool {
	in := false
	for _, it := range n.Items {
		if it.Lo <= v && v <= it.Hi {
			in = true
			break
		}
	}
	return in != n.Not
}

// spans appends the values 0-max that n allows to dst, as sorted,
// disjoint, inclusive ranges.
func (n *Num) spans(dst []span, max uint32) []span {
	start := len(dst)
	for _, it := range n.Items {
		dst = append(dst, span{int(it.Lo), int(min(it.Hi, max))})
	}
	in := dst[start:]
	slices.SortFunc(in, func(a, b span) int { return a.lo - b.lo })
	// Merge touching and overlapping ranges.
	k := 0
	for _, s := range in {
		if k > 0 && s.lo <= in[k-1].hi+1 {
			in[k-1].hi = max2(in[k-1].hi, s.hi)
			continue
		}
		in[k] = s
		k++
	}
	dst = dst[:start+k]
	if !n.Not {
		return dst
	}
	pos := dst[start:]
	out := make([]span, 0, len(pos)+1)
	next := 0
	for _, s := range pos {
		if s.lo > next {
			out = append(out, span{next, s.lo - 1})
		}
		next = s.hi + 1
	}
	if next <= int(max) {
		out = append(out, span{next, int(max)})
	}
	return append(dst[:start], out...)
}

func max2(a, b int) int {
	if a > b {
		return a
	}
	return b
}

// numSpec is what a numeric field's values are.
type numSpec struct {
	name string
	// max is the largest value a frame's field may have; writeMax the
	// largest value a rule may write (len: 65535 is written, >65535
	// matches IPv6 lengths up to max).
	max, writeMax uint32
	// want says what a value is, for messages ("a port 0-65535").
	want string
	// list is an example of a list of this field, for messages; rng of a
	// range ("" for 0-1023) and cmp of a comparison ("" for <64).
	list, rng, cmp string
	// noun is what one value is called, with its article ("a port";
	// "" for "a number").
	noun string
	// over, if set, is the message for a value above writeMax.
	over func(n uint32) string
	// named returns the name of value v in rule r, "" if none; byName
	// the value of a name, or a message. Nil: the field has no names.
	named  func(r *Rule, v uint32) string
	byName func(r *Rule, s string) (uint32, string)
	// hex: values may be written in hexadecimal, 0x12345.
	hex bool
}

func (s *numSpec) wantText() string {
	cmp := s.cmp
	if cmp == "" {
		cmp = "<" + strconv.Itoa(int(min(s.writeMax, 64)))
	}
	return "want " + s.want + ", a range like " + s.rangeEx() + ", a comparison like " + cmp + ", a list like " + s.list + " or a negated list like !" + s.list
}

func (s *numSpec) rangeEx() string {
	if s.rng != "" {
		return s.rng
	}
	return "0-" + strconv.Itoa(int(min(s.writeMax/4, 1023)))
}

func (s *numSpec) nounText() string {
	if s.noun == "" {
		return "a number"
	}
	return s.noun
}

// parseNum parses a numeric field's value: [!]ITEM[,ITEM...] where an ITEM
// is N, LO-HI, >N, >=N, <N, <=N or a name. It returns the message for a
// bad value, "" on success.
func parseNum(spec *numSpec, r *Rule, v string) (Num, string) {
	var n Num
	rest, neg := strings.CutPrefix(v, "!")
	n.Not = neg
	if rest == "" {
		return n, "nothing after ! (" + spec.wantText() + ")"
	}
	parts := strings.Split(rest, ",")
	if len(parts) > MaxListItems {
		return n, fmt.Sprintf("a list of %d items: at most %d in one list (write two rules, or ranges like %s)", len(parts), MaxListItems, spec.rangeEx())
	}
	n.Items = make([]NumItem, 0, len(parts))
	for _, p := range parts {
		if p == "" {
			return Num{}, "empty item in the list (write the items separated by single commas, as in " + spec.list + ")"
		}
		if strings.HasPrefix(p, "!") {
			return Num{}, "! goes before the whole list and negates it (write !" + strings.ReplaceAll(rest, "!", "") + " for none of them)"
		}
		it, msg := parseNumItem(spec, r, p)
		if msg != "" {
			return Num{}, msg
		}
		n.Items = append(n.Items, it)
	}
	// Each value at most once: an item inside or overlapping another
	// is a mistake (or a list that says less than it seems to).
	for i, a := range n.Items {
		for _, b := range n.Items[:i] {
			if a == b {
				return Num{}, fmt.Sprintf("%s given twice (name each value once in a list)", spec.itemText(r, a))
			}
			if a.Lo <= b.Hi && b.Lo <= a.Hi {
				return Num{}, fmt.Sprintf("%s and %s overlap (name each value once in a list)", spec.itemText(r, b), spec.itemText(r, a))
			}
		}
	}
	if n.Not {
		if sp := n.spans(nil, spec.max); len(sp) == 0 {
			return Num{}, fmt.Sprintf("!%s never matches: it excludes every value (leave the field out to match any)", rest)
		}
	}
	return n, ""
}

// parseNumItem parses one item of a list.
func parseNumItem(spec *numSpec, r *Rule, s string) (NumItem, string) {
	hex := false
	num := func(t string) (uint32, string) {
		v, ok := parseUint(t, 7)
		if h, isHex := strings.CutPrefix(t, "0x"); isHex && spec.hex && h != "" && len(h) <= 6 {
			u, err := strconv.ParseUint(h, 16, 32)
			v, ok, hex = int(u), err == nil, true
		}
		if !ok {
			return 0, fmt.Sprintf("%q is not %s (%s)", clipped(t), spec.nounText(), spec.wantText())
		}
		if uint32(v) > spec.writeMax || v < 0 {
			if spec.over != nil {
				return 0, spec.over(uint32(v))
			}
			return 0, fmt.Sprintf("%d is not %s 0-%d (%s)", v, spec.nounText(), spec.writeMax, spec.wantText())
		}
		return uint32(v), ""
	}
	for _, op := range []CmpOp{CmpGE, CmpLE, CmpGT, CmpLT} {
		rest, ok := strings.CutPrefix(s, cmpText[op])
		if !ok {
			continue
		}
		v, msg := num(rest)
		if msg != "" {
			return NumItem{}, msg
		}
		switch op {
		case CmpGT:
			if v >= spec.max {
				return NumItem{}, fmt.Sprintf(">%d never matches: no %s value is above %d", v, spec.name, spec.max)
			}
			return NumItem{Lo: v + 1, Hi: spec.max, Op: op, Hex: hex}, ""
		case CmpGE:
			return NumItem{Lo: v, Hi: spec.max, Op: op, Hex: hex}, ""
		case CmpLT:
			if v == 0 {
				return NumItem{}, "<0 never matches: no value is below 0"
			}
			return NumItem{Lo: 0, Hi: v - 1, Op: op, Hex: hex}, ""
		}
		return NumItem{Lo: 0, Hi: v, Op: op, Hex: hex}, ""
	}
	if strings.HasPrefix(s, "=") {
		return NumItem{}, fmt.Sprintf("%q: write the value alone for equality, as in %s %s", clipped(s), spec.name, strings.TrimLeft(s, "="))
	}
	if s[0] >= 'a' && s[0] <= 'z' {
		if spec.byName == nil {
			return NumItem{}, fmt.Sprintf("%q is not %s (%s)", clipped(s), spec.nounText(), spec.wantText())
		}
		v, msg := spec.byName(r, s)
		if msg != "" {
			return NumItem{}, msg
		}
		return NumItem{Lo: v, Hi: v, Op: CmpRange, Named: true}, ""
	}
	los, his, isRange := strings.Cut(s, "-")
	lo, msg := num(los)
	if msg != "" {
		return NumItem{}, msg
	}
	hi := lo
	if isRange {
		if hi, msg = num(his); msg != "" {
			return NumItem{}, msg
		}
		if lo > hi {
			return NumItem{}, fmt.Sprintf("range %s is empty (write the lower value first: %d-%d)", s, hi, lo)
		}
	}
	return NumItem{Lo: lo, Hi: hi, Op: CmpRange, Hex: hex}, ""
}

// itemText writes one item as it was written.
func (spec *numSpec) itemText(r *Rule, it NumItem) string {
	if it.Named && spec.named != nil {
		if name := spec.named(r, it.Lo); name != "" {
			return name
		}
	}
	if it.Hex {
		return hexRangeText(it.Lo, it.Hi, it.Op)
	}
	return rangeText(int(it.Lo), int(it.Hi), it.Op)
}

// hexRangeText is rangeText in hexadecimal (0x12345, 0x100-0x1ff, <0x100).
func hexRangeText(lo, hi uint32, op CmpOp) string {
	x := func(v uint32) string { return "0x" + strconv.FormatUint(uint64(v), 16) }
	switch op {
	case CmpGT:
		return ">" + x(lo-1)
	case CmpGE:
		return ">=" + x(lo)
	case CmpLT:
		return "<" + x(hi+1)
	case CmpLE:
		return "<=" + x(hi)
	}
	if lo == hi {
		return x(lo)
	}
	return x(lo) + "-" + x(hi)
}

// text writes n as it was written: [!]ITEM[,ITEM...].
func (spec *numSpec) text(r *Rule, n *Num) string {
	var b strings.Builder
	if n.Not {
		b.WriteByte('!')
	}
	for i, it := range n.Items {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(spec.itemText(r, it))
	}
	return b.String()
}

// rangeText writes lo-hi as written with op: N, LO-HI, >N, >=N, <N, <=N.
func rangeText(lo, hi int, op CmpOp) string {
	switch op {
	case CmpGT:
		return ">" + strconv.Itoa(lo-1)
	case CmpGE:
		return ">=" + strconv.Itoa(lo)
	case CmpLT:
		return "<" + strconv.Itoa(hi+1)
	case CmpLE:
		return "<=" + strconv.Itoa(hi)
	}
	if lo == hi {
		return strconv.Itoa(lo)
	}
	return strconv.Itoa(lo) + "-" + strconv.Itoa(hi)
}

// check reports what is wrong with a Num built in code (Parse never
// builds these): an item out of the field's values, an empty range, a
// comparison whose range is not what it leaves, a name on a range,
// overlapping items, too many, or a negation of everything.
func (spec *numSpec) check(r *Rule, n *Num) error {
	if len(n.Items) > MaxListItems {
		return fmt.Errorf("%s: a list of %d items: at most %d in one list (write two rules)", spec.name, len(n.Items), MaxListItems)
	}
	for i, it := range n.Items {
		bad := ""
		switch {
		case it.Lo > it.Hi:
			bad = "range is empty (write the lower value first)"
		case it.Hi > spec.max:
			bad = fmt.Sprintf("goes past %d, the largest %s", spec.max, spec.name)
		case it.Op == CmpNone || it.Op > CmpLE:
			bad = fmt.Sprintf("has an unknown comparison %d", it.Op)
		case it.Op == CmpGT && (it.Lo == 0 || it.Hi != spec.max || it.Lo-1 > spec.writeMax),
			it.Op == CmpGE && (it.Hi != spec.max || it.Lo > spec.writeMax),
			it.Op == CmpLT && (it.Lo != 0 || it.Hi+1 > spec.writeMax),
			it.Op == CmpLE && (it.Lo != 0 || it.Hi > spec.writeMax),
			it.Op == CmpRange && it.Hi > spec.writeMax:
			bad = fmt.Sprintf("is not what comparison %d leaves of 0-%d", it.Op, spec.max)
		case it.Named && (it.Lo != it.Hi || spec.named == nil || spec.named(r, it.Lo) == ""):
			bad = "has no name"
		case it.Hex && !spec.hex:
			bad = "is not written in hexadecimal"
		}
		if bad != "" {
			return fmt.Errorf("%s %d-%d: %s", spec.name, it.Lo, it.Hi, bad)
		}
		for _, b := range n.Items[:i] {
			if it.Lo <= b.Hi && b.Lo <= it.Hi {
				return fmt.Errorf("%s %s: %s and %s overlap (name each value once in a list)", spec.name, spec.text(r, n), spec.itemText(r, b), spec.itemText(r, it))
			}
		}
	}
	if n.Not && len(n.spans(nil, spec.max)) == 0 {
		return fmt.Errorf("%s %s never matches: it excludes every value", spec.name, spec.text(r, n))
	}
	return nil
}

// Nums holds a rule's numeric fields. A rule with none has a nil *Nums,
// so that each of the million prefix-only rules of a big set carries one
// pointer for all of them (each pointer field in Rule is about 25 MiB of
// peak memory replacing 1M prefixes).
type Nums struct {
	Sport, Dport Num
	// Port: the source or the destination port (FlowSpec type 4).
	Port Num
	// Len is the IP packet's length (FlowSpec type 10): IPv4 total
	// length, IPv6 40 + payload length (see lenSpec).
	Len   Num
	TTL   Num // IPv4 TTL or IPv6 hop limit
	DSCP  Num // the top 6 bits of the IPv4 TOS / IPv6 traffic class
	Type  Num // ICMP or ICMPv6 type
	Code  Num // ICMP or ICMPv6 code
	Queue Num // the rx queue the frame arrived on
	// Proto: protocols as a list, range, comparison or negation, when
	// Rule.Proto (one protocol, with HasProto) cannot say them.
	Proto Num
	// FlowLabel is the IPv6 flow label (FlowSpec type 13, RFC 8956 3.7;
	// 20 bits): only IPv6 frames match it.
	FlowLabel Num
}

// Clone returns a copy of n (a new, empty Nums for nil), for a rule
// changed from another that shares n. The items are shared: nothing
// changes them.
func (n *Nums) Clone() *Nums {
	if n == nil {
		return &Nums{}
	}
	c := *n
	return &c
}

// nums returns r's numeric fields, made if r has none.
func (r *Rule) nums() *Nums {
	if r.Nums == nil {
		r.Nums = &Nums{}
	}
	return r.Nums
}

// recNum is where a numeric field's one simple item lives in struct
// fd_rule_rec: lo and hi (width bytes each), and the offsets of its
// comparison and its named flag, or -1 if the record has none for it.
// An item written as a comparison keeps the value written in lo.
type recNum struct {
	lo, hi, width, op, named int
	// never: the record has no members for the field (flowlabel): it is
	// always in fd_rule_lists.
	never bool
}

// inline reports whether the record's members hold n.
func (rn recNum) inline(n *Num) bool {
	if rn.never || len(n.Items) != 1 || n.Not || n.Items[0].Hex {
		return false
	}
	it := n.Items[0]
	if it.Op != CmpRange && rn.op < 0 || it.Named && rn.named < 0 {
		return false
	}
	lim := uint32(1)<<(8*rn.width) - 1
	return it.Hi <= lim || it.Op != CmpRange
}

func (rn recNum) put(b []byte, off int, v uint32) {
	if rn.width == 1 {
		b[off] = uint8(v)
	} else {
		binary.LittleEndian.PutUint16(b[off:], uint16(v))
	}
}

func (rn recNum) get(b []byte, off int) uint32 {
	if rn.width == 1 {
		return uint32(b[off])
	}
	return uint32(binary.LittleEndian.Uint16(b[off:]))
}

// encode writes n's one item (inline(n)) into the record b.
func (rn recNum) encode(b []byte, n *Num) {
	it := n.Items[0]
	lo, hi := it.Lo, it.Hi
	switch it.Op {
	case CmpGT:
		lo, hi = it.Lo-1, 0
	case CmpGE:
		hi = 0
	case CmpLT:
		lo, hi = it.Hi+1, 0
	case CmpLE:
		lo, hi = it.Hi, 0
	}
	rn.put(b, rn.lo, lo)
	rn.put(b, rn.hi, hi)
	if rn.op >= 0 {
		b[rn.op] = uint8(it.Op)
	}
	if rn.named >= 0 {
		b[rn.named] = 0
		if it.Named {
			b[rn.named] = 1
		}
	}
}

// decode reads the item encode wrote.
func (rn recNum) decode(b []byte, spec *numSpec) Num {
	lo, hi := rn.get(b, rn.lo), rn.get(b, rn.hi)
	op := CmpRange
	if rn.op >= 0 && b[rn.op] != 0 {
		op = CmpOp(b[rn.op])
	}
	switch op {
	case CmpGT:
		lo, hi = lo+1, spec.max
	case CmpGE:
		hi = spec.max
	case CmpLT:
		lo, hi = 0, lo-1
	case CmpLE:
		lo, hi = 0, lo
	}
	named := rn.named >= 0 && b[rn.named] != 0
	return Num{Items: []NumItem{{Lo: lo, Hi: hi, Op: op, Named: named}}}
}

// members names the record members of a field called name.
func (rn recNum) members(name string) []recMember {
	if rn.never {
		return nil
	}
	m := []recMember{{name + "_lo", rn.lo, rn.width}, {name + "_hi", rn.hi, rn.width}}
	if rn.op >= 0 {
		m = append(m, recMember{name + "_op", rn.op, 1})
	}
	if rn.named >= 0 {
		m = append(m, recMember{name + "_named", rn.named, 1})
	}
	return m
}

// listsSize is the size of a value of fd_rule_lists.
const listsSize = 1024

// The lists of a record (fd_rule_lists): for each numeric field whose
// record members cannot hold it, its index in matchFields, Not, the
// number of items (a byte each, then a zero byte), and the items, 12
// bytes each: lo, hi (u32), op, named, two zero bytes.
const (
	listHeadSize = 4
	listItemSize = 12
)

// listed returns r's value of the numeric field f (or proto's list) if
// its record cannot hold it, else nil.
func (f *matchField) listed(r *Rule) *Num {
	if f.num == nil || r.Nums == nil {
		return nil
	}
	if f.store == storeProto {
		if r.HasProto || !r.Nums.Proto.IsSet() {
			return nil
		}
		return &r.Nums.Proto
	}
	if n := f.numOf(r); n.IsSet() && !f.numRec.inline(n) {
		return n
	}
	return nil
}

// encodeLists returns r's numeric fields that its record cannot hold, in
// fd_rule_lists' encoding, or nil if there are none.
func encodeLists(r *Rule) []byte {
	if r.Nums == nil {
		return nil
	}
	var b []byte
	for i := range matchFields {
		n := matchFields[i].listed(r)
		if n == nil {
			continue
		}
		if b == nil {
			b = make([]byte, 0, listsSize)
		}
		not := byte(0)
		if n.Not {
			not = 1
		}
		b = append(b, byte(i), not, byte(len(n.Items)), 0)
		for _, it := range n.Items {
			named := byte(0)
			if it.Named {
				named = 1
			}
			if it.Hex {
				named |= 2
			}
			b = binary.LittleEndian.AppendUint32(b, it.Lo)
			b = binary.LittleEndian.AppendUint32(b, it.Hi)
			b = append(b, byte(it.Op), named, 0, 0)
		}
	}
	if b != nil {
		b = b[:listsSize] // zero-padded: within the capacity
	}
	return b
}

// listsBytes is how many bytes of fd_rule_lists' value r's lists take.
func listsBytes(r *Rule) int {
	n := 0
	for i := range matchFields {
		if l := matchFields[i].listed(r); l != nil {
			n += listHeadSize + listItemSize*len(l.Items)
		}
	}
	return n
}

// decodeLists sets the numeric fields of r that b (a value of
// fd_rule_lists) holds.
func decodeLists(b []byte, r *Rule) error {
	for len(b) >= listHeadSize && b[2] != 0 {
		i, not, cnt := int(b[0]), b[1] != 0, int(b[2])
		b = b[listHeadSize:]
		if i >= len(matchFields) || matchFields[i].num == nil || len(b) < cnt*listItemSize {
			return errors.New("fastdrop: a rule's lists are corrupt")
		}
		n := Num{Not: not, Items: make([]NumItem, cnt)}
		for k := range n.Items {
			e := b[k*listItemSize:]
			n.Items[k] = NumItem{Lo: binary.LittleEndian.Uint32(e), Hi: binary.LittleEndian.Uint32(e[4:]), Op: CmpOp(e[8]), Named: e[9]&1 != 0, Hex: e[9]&2 != 0}
		}
		b = b[cnt*listItemSize:]
		f := &matchFields[i]
		*f.numOf(r.withNums()) = n
		if f.store == storeProto { // the record's proto member said one
			r.Proto, r.HasProto = 0, false
		}
	}
	return nil
}

// withNums is r with its Nums made if it had none.
func (r *Rule) withNums() *Rule { r.nums(); return r }

// numOpts is what a numeric field's entry of matchFields is made of.
type numOpts struct {
	spec     numSpec
	at       uintptr // offset of its Num in Nums
	examples []string
	textPos  int
	ip       bool
	v6       bool // only IPv6 frames match it
	frames   frameKind
	// check is the field's own check (its protocol), after the common
	// ones; nil for none.
	check func(r *Rule, n *Num) error
	// value is the frame's value of the field; false if it has none.
	value          func(pkt *packet) (uint32, bool)
	fld, dir, bits int
	recFlag        uint32
	rec            recNum
}

// numEntry is the entry of matchFields of a numeric field.
func numEntry(o numOpts) matchField {
	spec := o.spec
	f := matchField{
		name:     spec.name,
		examples: o.examples,
		need:     spec.name + " needs a value (" + spec.wantText() + ")",
		at:       o.at,
		store:    storeNum,
		textPos:  o.textPos,
		ip:       o.ip,
		v6:       o.v6,
		frames:   o.frames,
		recFlag:  o.recFlag,
		rec:      o.rec.members(spec.name),
		num:      &spec,
		numRec:   o.rec,
		numAt:    o.at,
	}
	at := o.at
	numOf := func(r *Rule) *Num { return numAt(r.Nums, at) }
	f.parse = func(r *Rule, v string) string {
		n, msg := parseNum(&spec, r, v)
		if msg != "" {
			return fmt.Sprintf("%s %s: %s", spec.name, clipped(v), msg)
		}
		*numAt(r.nums(), at) = n
		return ""
	}
	f.text = func(r *Rule) string { return spec.name + " " + spec.text(r, numOf(r)) }
	f.check = func(r *Rule) error {
		n := numOf(r)
		if err := spec.check(r, n); err != nil {
			return err
		}
		if o.check != nil {
			return o.check(r, n)
		}
		return nil
	}
	f.match = func(r *Rule, pkt *packet) bool {
		v, ok := o.value(pkt)
		return ok && numOf(r).Contains(v)
	}
	if o.bits > 0 {
		f.direct = &directField{fld: o.fld, off: o.dir, bits: o.bits,
			spans: func(r *Rule, dst []span) []span { return numOf(r).spans(dst, spec.max) }}
	}
	f.encode = func(b []byte, r *Rule) {
		if n := numOf(r); o.rec.inline(n) {
			o.rec.encode(b, n)
		}
	}
	f.decode = func(b []byte, r *Rule) { *numAt(r.nums(), at) = o.rec.decode(b, &spec) }
	if o.rec.never {
		f.encode = func([]byte, *Rule) {}
		f.decode = func([]byte, *Rule) {} // fd_rule_lists has it
	}
	return f
}
