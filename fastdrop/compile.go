package fastdrop

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"net/netip"
	"runtime"
	"slices"
	"strconv"
	"sync"

	"github.com/xdpdrop/xdpdrop/gen"
)

// Layout constants of bpf/fastdrop.h, under short names.
const (
	maxCompound  = int(gen.FastdropFdLayoutFD_MAX_COMPOUND)
	numKinds     = int(gen.FastdropFdLayoutFD_KINDS)
	valActShift  = uint32(gen.FastdropFdLayoutFD_VAL_ACT_SHIFT)
	valSlotMask  = uint32(gen.FastdropFdLayoutFD_VAL_SLOT_MASK)
	slotMalform  = uint32(gen.FastdropFdLayoutFD_SLOT_MALFORMED) // + Action
	slotDefault  = uint32(gen.FastdropFdLayoutFD_SLOT_DEFAULT)   // + Action
	slotRetired  = uint32(gen.FastdropFdLayoutFD_SLOT_RETIRED)   // + Action
	firstRule    = uint32(gen.FastdropFdLayoutFD_SLOT_RULES)
	b64Half      = int(gen.FastdropFdLayoutFD_B64HALF)
	tabHalf      = int(gen.FastdropFdLayoutFD_TAB_HALF)
	tabPool      = int(gen.FastdropFdLayoutFD_TAB_POOL)
	tabChunks    = int(gen.FastdropFdLayoutFD_TAB_CHUNKS)
	tabExt       = uint16(gen.FastdropFdLayoutFD_TAB_EXT)
	bmField      = int(gen.FastdropFdLayoutFD_BM_FIELD)
	bmHalf       = int(gen.FastdropFdLayoutFD_BM_HALF)
	v6Probes     = int(gen.FastdropFdLayoutFD_V6PROBES)
	v4Ext        = uint32(0x80000000)
	recSize      = int(gen.FastdropFdLayoutFD_REC_SIZE)     // struct fd_rule_rec
	v6EntSize    = int(gen.FastdropFdLayoutFD_V6ENT_SIZE)   // struct fd_v6_ent
	counterSize  = int(gen.FastdropFdLayoutFD_COUNTER_SIZE) // struct counter
	directSize   = int(gen.FastdropFdLayoutFD_DIRECT)       // a table indexed by 16 bits
	trieChunk    = int(gen.FastdropFdLayoutFD_TAB_CHUNK)
	w4L1         = int(gen.FastdropFdLayoutFD_TAB_W4L1)
	w4Chunk      = int(gen.FastdropFdLayoutFD_TAB_W4CHUNK)
	tbl24Entries = 1 << 24 // FD_V4_TBL24, untyped (checked below)
	// Byte offsets in struct fd_cls_half.
	clsTab = int64(gen.FastdropFdLayoutFD_CLS_TAB)
	clsBm  = int64(gen.FastdropFdLayoutFD_CLS_BM)
	clsB64 = int64(gen.FastdropFdLayoutFD_CLS_B64)
	// Byte offsets in struct fd_main (the state, then struct fd_half
	// twice) and in struct fd_half, and its size.
	mainHalf  = int64(gen.FastdropFdLayoutFD_MAIN_HALF)
	halfCls   = int64(gen.FastdropFdLayoutFD_HALF_CLS)
	halfTbl24 = int64(gen.FastdropFdLayoutFD_HALF_TBL24)
	halfDconf = int64(gen.FastdropFdLayoutFD_HALF_DCONF)
	halfSize  = int64(gen.FastdropFdLayoutFD_HALF_SIZE)
)

// tbl24Entries is FD_V4_TBL24, or this does not compile.
var _ = [1]struct{}{}[tbl24Entries-int(gen.FastdropFdLayoutFD_V4TBL24)]

// fieldTab is the offset of field fld's table in the u16 class tables
// (for an address field, its first level), fieldB64 that of its bitmaps in
// fd_cls_half.b64 (at most 64 rules): a direct field's table holds one
// entry per value in both (FD_DIR_*), an address field's bitmaps are by
// class.
func fieldTab(fld int) int {
	switch fld {
	case fldSrc4:
		return int(gen.FastdropFdLayoutFD_TAB_SRC4)
	case fldDst4:
		return int(gen.FastdropFdLayoutFD_TAB_DST4)
	case fldSrc6:
		return int(gen.FastdropFdLayoutFD_TAB_SRC6)
	case fldDst6:
		return int(gen.FastdropFdLayoutFD_TAB_DST6)
	}
	return directFieldOf(fld).off
}

func fieldB64(fld int) int {
	switch fld {
	case fldSrc4:
		return int(gen.FastdropFdLayoutFD_B64SRC4)
	case fldDst4:
		return int(gen.FastdropFdLayoutFD_B64DST4)
	case fldSrc6:
		return int(gen.FastdropFdLayoutFD_B64SRC6)
	case fldDst6:
		return int(gen.FastdropFdLayoutFD_B64DST6)
	}
	return directFieldOf(fld).off
}

// Offsets of the front tables in fd_cls_half.b64, and of their classes
// and bitmaps (more than 64 rules) in fd_cls_half.tab and .bm.
const (
	b64Ports  = int64(gen.FastdropFdLayoutFD_B64PORTS)
	b64Front  = int64(gen.FastdropFdLayoutFD_B64FRONT)
	tabFPorts = int64(gen.FastdropFdLayoutFD_TAB_FPORTS)
	tabFProto = int64(gen.FastdropFdLayoutFD_TAB_FPROTO)
	bmFront   = int64(gen.FastdropFdLayoutFD_BM_FRONT)
	bmFronts  = int(gen.FastdropFdLayoutFD_BM_FRONTS)
	tabW4     = int64(gen.FastdropFdLayoutFD_TAB_W4)
	tabW4Pool = int64(gen.FastdropFdLayoutFD_TAB_W4POOL)
	w4Chunks  = int(gen.FastdropFdLayoutFD_TAB_W4CHUNKS)
	// Entries of the front tables.
	frontPortsN = int(gen.FastdropFdLayoutFD_FRONT_PORTS_N)
	frontProtoN = int(gen.FastdropFdLayoutFD_FRONT_PROTO_N)
)

const (
	fldEther = int(gen.FastdropFdFieldFD_FLD_ETHER)
	fldProto = int(gen.FastdropFdFieldFD_FLD_PROTO)
	fldSport = int(gen.FastdropFdFieldFD_FLD_SPORT)
	fldDport = int(gen.FastdropFdFieldFD_FLD_DPORT)
	fldSrc4  = int(gen.FastdropFdFieldFD_FLD_SRC4)
	fldDst4  = int(gen.FastdropFdFieldFD_FLD_DST4)
	fldSrc6  = int(gen.FastdropFdFieldFD_FLD_SRC6)
	fldDst6  = int(gen.FastdropFdFieldFD_FLD_DST6)
	fldQueue = int(gen.FastdropFdFieldFD_FLD_QUEUE)
	numField = int(gen.FastdropFdFieldFD_FLD_MAX)
)

// The rx queues a rule can name (0 to MaxQueue) and the entries of a
// queue table: a frame of a higher queue is indexed as MaxQueue+1, in no
// rule's range.
const (
	MaxQueue = int(gen.FastdropFdLayoutFD_QUEUES) - 1
)

// mkVal is what the program gets from a table: action and counter slot.
func mkVal(a Action, slot uint32) uint32 { return uint32(a)<<valActShift | slot }

func valSlot(v uint32) uint32   { return v & valSlotMask }
func valAction(v uint32) Action { return Action(v >> valActShift & 3) }

// A rule keeps its counter slot (and so its counters) across changes to
// other rules. Prefix rules are known by prefix and action (a pointer-free
// key: there may be millions), compound rules by their canonical text and
// which occurrence of that text they are.
type slotKey struct {
	hi, lo uint64
	bits   uint8
	v6     bool
	dst    bool // the destination prefix table's
	action Action
}

// slotKeyOfRule is the slot key of prefix rule r.
func slotKeyOfRule(r *Rule) slotKey {
	k := r.PrefixKey()
	s := slotKeyOf(k.Prefix, r.Action)
	s.dst = k.Dst
	return s
}

func slotKeyOf(p netip.Prefix, a Action) slotKey {
	b := p.Addr().As16()
	return slotKey{
		hi:     binary.BigEndian.Uint64(b[:8]),
		lo:     binary.BigEndian.Uint64(b[8:]),
		bits:   uint8(p.Bits()),
		v6:     !p.Addr().Is4(),
		action: a,
	}
}

// compoundKeys returns the key of each compound rule of rules, by index.
func compoundKeys(rules []Rule) map[int]string {
	keys := make(map[int]string)
	seen := make(map[string]int)
	for i := range rules {
		if rules[i].IsPrefixOnly() {
			continue
		}
		s := rules[i].String()
		if o := rules[i].Origin; o != "" {
			s = o + "\x00" + s // the same text from two origins is two rules
		}
		seen[s]++
		keys[i] = s + "#" + strconv.Itoa(seen[s])
	}
	return keys
}

// validateRules is RuleSet.Validate for the engine: the same checks, made
// fast for millions of rules: each rule's own Validate spread over the
// CPUs, the number of compound rules; a prefix given twice is found by the
// table builders, which sort the prefixes anyway (see dupPrefixError).
func validateRules(rules []Rule, policy, malformed Action) error {
	if err := (&RuleSet{Policy: policy, Malformed: malformed}).Validate(); err != nil {
		return err
	}
	if len(rules) > MaxRules {
		return fmt.Errorf("%d rules: %w: one fast-drop program holds at most %d rules; %s", len(rules), ErrCapacity, MaxRules, capacityAdvice)
	}
	workers := min(runtime.GOMAXPROCS(0), max(1, len(rules)/50_000))
	firstBad := make([]int, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		lo, hi := w*len(rules)/workers, (w+1)*len(rules)/workers
		firstBad[w] = -1
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := lo; i < hi; i++ {
				if err := rules[i].validate(); err != nil {
					firstBad[w], errs[w] = i, err
					return
				}
			}
		}()
	}
	compound := 0
	var tooMany error
	for i := range rules {
		if !rules[i].IsPrefixOnly() {
			if compound++; compound > MaxCompoundRules && tooMany == nil {
				tooMany = fmt.Errorf("rule %d (%s): %w: more than %d", i, ruleWhere(rules[i]), ErrTooManyRules, MaxCompoundRules)
			}
		}
	}
	wg.Wait()
	for w := range workers {
		if firstBad[w] >= 0 {
			i := firstBad[w]
			return fmt.Errorf("rule %d (%s): %w", i, ruleWhere(rules[i]), errs[w])
		}
	}
	return tooMany
}

// dupPrefixError is what a table builder returns when two prefix rules
// have the same prefix; the engine names the rules (by their vals).
type dupPrefixError struct {
	prefix string
	a, b   uint32 // vals
}

func (e *dupPrefixError) Error() string {
	return fmt.Sprintf("%s: %s twice", ErrDuplicatePrefix, e.prefix)
}

func (e *dupPrefixError) Unwrap() error { return ErrDuplicatePrefix }

// ---- rule records (struct fd_rule_rec) ----

const (
	recFlagSrc   = uint32(gen.FastdropFdRecFlagsFD_REC_SRC)
	recFlagDst   = uint32(gen.FastdropFdRecFlagsFD_REC_DST)
	recFlagProto = uint32(gen.FastdropFdRecFlagsFD_REC_PROTO)
	recFlagSport = uint32(gen.FastdropFdRecFlagsFD_REC_SPORT)
	recFlagDport = uint32(gen.FastdropFdRecFlagsFD_REC_DPORT)
	recFlagFrag  = uint32(gen.FastdropFdRecFlagsFD_REC_FRAG)
	recFlagQueue = uint32(gen.FastdropFdRecFlagsFD_REC_QUEUE)
	recFlagLists = uint32(gen.FastdropFdRecFlagsFD_REC_LISTS)
)

// Byte offsets in struct fd_rule_rec; TestRecordLayout checks them against
// the generated type.
const (
	recAction    = 0
	recFamily    = 1
	recSrcLen    = 2
	recDstLen    = 3
	recFlags     = 4 // u32
	recLine      = 8
	recOrder     = 12
	recAdded     = 16
	recRemoved   = 20
	recSrc       = 24
	recDst       = 40
	recEther     = 56
	recSport     = 58
	recDport     = 62
	recProto     = 66
	recTTL       = 67
	recTCPSet    = 69 // then tcp_clear, tcp_exact
	recQueue     = 72 // queue_lo, queue_hi
	recDSCP      = 76 // dscp_lo, dscp_hi, dscp_named
	recTypeNamed = 79
	recOrigin    = 80
	recSample    = 120 // u32, the sample modifier's N
	recType      = 124 // type_lo, type_hi
	recCode      = 126 // code_lo, code_hi
	recLen       = 128 // len_lo, len_hi, len_op
	recFragSet   = 133 // frag_set, frag_clear
	recPort      = 136 // port_lo, port_hi
	recTTLOp     = 140 // how ttl, dscp, type and code were written (enum fd_cmp)
	recDSCPOp    = 141
	recTypeOp    = 142
	recCodeOp    = 143
	originLen    = int(gen.FastdropFdLayoutFD_ORIGIN_LEN)
)

// recLive reports whether a record with generations added and removed is
// in the rule set of generation g (serial number arithmetic: they wrap).
func recLive(added, removed, g uint32) bool {
	return int32(g-added) >= 0 && (removed == 0 || int32(removed-g) > 0)
}

// encodeRecord writes r into b (recSize bytes): each match field as its
// matchFields entry says, then what every record has.
func encodeRecord(b []byte, r *Rule, order, added, removed uint32) {
	clear(b[:recSize])
	le := binary.LittleEndian
	b[recAction] = uint8(r.Action)
	var flags uint32
	for i := range matchFields {
		f := &matchFields[i]
		if f.recFlag == 0 || f.isSet(r) {
			flags |= f.recFlag
			f.encode(b, r)
		}
	}
	if listsBytes(r) > 0 {
		flags |= recFlagLists // the fields are in fd_rule_lists (Engine.writeRecords)
	}
	le.PutUint32(b[recFlags:], flags)
	copy(b[recOrigin:recOrigin+originLen], r.Origin)
	le.PutUint32(b[recLine:], uint32(max(r.Line, 0)))
	le.PutUint32(b[recOrder:], order)
	le.PutUint32(b[recAdded:], added)
	le.PutUint32(b[recRemoved:], removed)
	le.PutUint32(b[recSample:], r.Sample)
}

// decodeRecord reads a record; ok is false for a free slot.
func decodeRecord(b []byte) (r Rule, order, added, removed uint32, ok bool) {
	if b[recAction] == 0 {
		return r, 0, 0, 0, false
	}
	le := binary.LittleEndian
	order = decodeRecordInto(b, &r)
	return r, order, le.Uint32(b[recAdded:]), le.Uint32(b[recRemoved:]), true
}

// decodeRecordInto reads the rule of a record that is not free into *r
// (zero), in place, and returns its order. (Filling a slice element in
// place saves copying a Rule, pointers and all, per record.)
func decodeRecordInto(b []byte, r *Rule) (order uint32) {
	le := binary.LittleEndian
	r.Action = Action(b[recAction])
	flags := le.Uint32(b[recFlags:])
	for i := range matchFields {
		if f := &matchFields[i]; f.recFlag == 0 || flags&f.recFlag != 0 {
			f.decode(b, r)
		}
	}
	r.Line = int(le.Uint32(b[recLine:]))
	if o := b[recOrigin : recOrigin+originLen]; o[0] != 0 {
		r.Origin = internOrigin(o)
	}
	r.Sample = le.Uint32(b[recSample:])
	return le.Uint32(b[recOrder:])
}

// ---- compound rules: the bit-vector classifier ----

// bitmap is struct fd_bm: bit i stands for compound rule i.
type bitmap [4]uint64

func (b *bitmap) set(i int) { b[i/64] |= 1 << (i % 64) }

// ctzHash is fd_ctz_hash in bpf/fastdrop.h of a word whose lowest set bit
// is bit i (0-63): the index of rule i's val in fd_conf.crule_h.
func ctzHash(i int) int { return int((uint64(1) << i * 0x03f79d71b4ca8b09) >> 58) }

// classifier is the compiled form of the compound rules: what goes into a
// half's struct fd_cls_half, and its fd_conf fields.
type classifier struct {
	fields uint32
	kind   [numKinds]bitmap
	tabs   [numField][]uint16 // each used field's direct table (the first level for addresses)
	pool   []uint16           // trie chunks of 256 entries
	bm     []bitmap           // bmHalf entries
	used   [numField]int      // classes of each field
	// With at most 64 rules, the same as one-word bitmaps (fd_cls_half.b64):
	// by value for ether, proto and ports, by class for addresses.
	b64 [numField][]uint64
	// The front tables (FD_B64_PORTS, FD_B64_FRONT): the first read of an
	// IP frame, the AND of its kind's, ether's, proto's and (with ports)
	// dport's bitmaps.
	frontPorts, frontProto []uint64
	// With more than 64 rules, the front tables hold classes
	// (FD_TAB_FPORTS, FD_TAB_FPROTO), whose bitmaps are frontBm.
	frontPortsCls, frontProtoCls []uint16
	frontBm                      []bitmap
	// With at most 64 rules, the IPv4 fields' two-level tries
	// (FD_TAB_W4): the first levels of src4 and dst4, then the chunks.
	// v4ps are those fields' prefixes in class order.
	w4     [2][]uint16
	w4pool []uint16
	v4ps   [2][]netip.Prefix
	// vals of the rules, in order (fd_conf.crule).
	vals []uint32
	// lateFrom: the rules from this position on are late (fd_conf.late_from).
	lateFrom int
	// rebuilt: compiled for the change being made (else kept from the
	// last one).
	rebuilt bool
}

func (c *classifier) tab(fld, size int) []uint16 {
	if c.tabs[fld] == nil {
		c.tabs[fld] = make([]uint16, size)
	}
	return c.tabs[fld]
}

// compileCompound builds the classifier for rules (the compound rules in
// order, at most maxCompound).
func compileCompound(rules []*Rule) (*classifier, error) {
	if len(rules) > maxCompound {
		return nil, fmt.Errorf("%d compound rules: %w (at most %d)", len(rules), ErrTooManyRules, maxCompound)
	}
	c := &classifier{bm: make([]bitmap, bmHalf)}
	if len(rules) == 0 {
		return c, nil
	}
	for k := range numKinds {
		fam, nonfirst, ports := [3]int{0, 4, 6}[k/4], k&2 != 0, k&1 != 0
		for i, r := range rules {
			if kindAllows(r, fam, nonfirst, ports) {
				c.kind[k].set(i)
			}
		}
	}
	var spans []span
	for i := range matchFields {
		if f := &matchFields[i]; f.direct != nil {
			if err := c.direct(f, rules, &spans); err != nil {
				return nil, err
			}
		}
	}
	for _, f := range []struct {
		fld int
		v4  bool
		get func(*Rule) netip.Prefix
	}{
		{fldSrc4, true, func(r *Rule) netip.Prefix { return r.Src }},
		{fldDst4, true, func(r *Rule) netip.Prefix { return r.Dst }},
		{fldSrc6, false, func(r *Rule) netip.Prefix { return r.Src }},
		{fldDst6, false, func(r *Rule) netip.Prefix { return r.Dst }},
	} {
		if err := c.prefixes(f.fld, rules, f.v4, f.get); err != nil {
			return nil, err
		}
	}
	if len(rules) <= 64 {
		for fld := range numField {
			if c.fields&(1<<fld) == 0 {
				continue
			}
			bm := c.bm[fld*bmField:]
			switch {
			case directFieldOf(fld) != nil:
				tab := c.tabs[fld]
				c.b64[fld] = make([]uint64, len(tab))
				for v, cls := range tab {
					c.b64[fld][v] = bm[cls][0]
				}
			default:
				c.b64[fld] = make([]uint64, c.used[fld])
				for k := range c.used[fld] {
					c.b64[fld][k] = bm[k][0]
				}
			}
		}
	}
	if len(rules) <= 64 {
		if err := c.wideTries(); err != nil {
			return nil, err
		}
	}
	c.fronts(len(rules) <= 64)
	// At most 4 x 513 port classes and 4 x 257 protocol classes.
	if len(c.frontBm) > bmFronts {
		return nil, fmt.Errorf("%d front classes, room for %d", len(c.frontBm), bmFronts)
	}
	return c, nil
}

// fronts fills the front tables: for each IP frame, the AND of the
// bitmaps of its kind, EtherType (its family's), protocol and, with ports,
// destination port. They are indexed as fd_front_ports() and
// fd_front_proto() in bpf/fastdrop.h: (IPv6, UDP) x dport and (IPv6,
// non-first fragment) x proto. With one-word bitmaps (at most 64 rules) an
// entry is the bitmap's word (FD_B64_PORTS, FD_B64_FRONT), else a class
// whose bitmap is in frontBm (FD_TAB_FPORTS, FD_TAB_FPROTO).
func (c *classifier) fronts(oneWord bool) {
	all := bitmap{^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0)}
	get := func(fld, v int) bitmap {
		if c.fields&(1<<fld) == 0 {
			return all
		}
		return c.bm[fld*bmField+int(c.tabs[fld][v])]
	}
	and := func(a, b bitmap) bitmap { return bitmap{a[0] & b[0], a[1] & b[1], a[2] & b[2], a[3] & b[3]} }
	classes := make(map[bitmap]uint16)
	var words []uint64
	var cls []uint16
	put := func(i int, b bitmap) {
		if oneWord {
			words[i] = b[0]
			return
		}
		k, ok := classes[b]
		if !ok {
			k = uint16(len(c.frontBm))
			classes[b] = k
			c.frontBm = append(c.frontBm, b)
		}
		cls[i] = k
	}
	copyEntry := func(dst, src int) {
		if oneWord {
			words[dst] = words[src]
		} else {
			cls[dst] = cls[src]
		}
	}
	table := func(n int) {
		if oneWord {
			words = make([]uint64, n)
		} else {
			cls = make([]uint16, n)
		}
	}

	table(frontPortsN)
	for v6 := range 2 {
		kind, ether := 4|1, 0x0800 // with ports
		if v6 == 1 {
			kind, ether = 8|1, 0x86dd
		}
		for udp, proto := range []int{6, 17} {
			base := and(and(c.kind[kind], get(fldEther, ether)), get(fldProto, proto))
			// The ports of one dport class share an entry: the first
			// port of each class computes it, the others copy it.
			row := (v6<<1 | udp) << 16
			first := make([]int, max(c.used[fldDport], 1))
			for port := range 65536 {
				d := 0
				if c.fields&(1<<fldDport) != 0 {
					d = int(c.tabs[fldDport][port])
				}
				if first[d] == 0 {
					first[d] = row + port + 1 // + 1: 0 is "none yet"
					put(row+port, and(base, get(fldDport, port)))
				} else {
					copyEntry(row+port, first[d]-1)
				}
			}
		}
	}
	c.frontPorts, c.frontPortsCls = words, cls

	table(frontProtoN)
	for v6 := range 2 {
		kind, ether := 4, 0x0800
		if v6 == 1 {
			kind, ether = 8, 0x86dd
		}
		for nonfirst := range 2 {
			base := and(c.kind[kind|nonfirst<<1], get(fldEther, ether))
			for proto := range 256 {
				put((v6<<1|nonfirst)<<8|proto, and(base, get(fldProto, proto)))
			}
		}
	}
	c.frontProto, c.frontProtoCls = words, cls
}

// kindAllows reports whether r can match a frame of family fam (0 = not
// IP), that is (or is not) a non-first fragment and has (or has no) ports,
// leaving aside the fields that have tables: for each field r sets, what
// its entry in matchFields says of the frames that can match it.
func kindAllows(r *Rule, fam int, nonfirst, ports bool) bool {
	for i := range matchFields {
		f := &matchFields[i]
		if !f.isSet(r) {
			continue
		}
		if f.ip && fam == 0 || f.v6 && fam != 6 || f.frames == framesPorts && !ports || f.frames == framesNonfirst && !nonfirst || f.frames == framesFirst && nonfirst {
			return false
		}
		if f.store == storePrefix {
			if p := f.prefixOf(r); p.Addr().Is4() && fam != 4 || !p.Addr().Is4() && fam != 6 {
				return false
			}
		}
	}
	return true
}

// span is an inclusive range of values of a direct field.
type span struct{ lo, hi int }

// direct compiles the direct field f (FD_DIRECT_FIELDS in bpf/fastdrop.h:
// a table indexed by the frame's value): the values split into intervals
// at the ends of every rule's spans; class k is the k-th interval, and its
// bitmap has the rules whose spans hold it and the rules without the field.
// spans is scratch space.
func (c *classifier) direct(f *matchField, rules []*Rule, spans *[]span) error {
	d := f.direct
	size := 1 << d.bits
	cuts := []int{0}
	for _, r := range rules {
		if f.isSet(r) {
			*spans = d.spans(r, (*spans)[:0])
			for _, s := range *spans {
				cuts = append(cuts, s.lo, s.hi+1)
			}
		}
	}
	if len(cuts) == 1 {
		return nil
	}
	slices.Sort(cuts)
	cuts = slices.Compact(cuts)
	if cuts[len(cuts)-1] == size {
		cuts = cuts[:len(cuts)-1]
	}
	if len(cuts) > bmField {
		return fmt.Errorf("compound rules: %s splits its values into %d intervals, room for %d: %w", f.name, len(cuts), bmField, ErrCapacity)
	}
	fld := d.fld
	c.fields |= 1 << fld
	c.used[fld] = len(cuts)
	bm := c.bm[fld*bmField:]
	tab := c.tab(fld, size)
	for k, lo := range cuts {
		hi := size
		if k+1 < len(cuts) {
			hi = cuts[k+1]
		}
		for v := lo; v < hi; v++ {
			tab[v] = uint16(k)
		}
	}
	for i, r := range rules {
		if !f.isSet(r) {
			for k := range cuts {
				bm[k].set(i)
			}
			continue
		}
		*spans = d.spans(r, (*spans)[:0])
		for _, s := range *spans {
			// The classes of the values lo..hi: the one that starts
			// at lo, and each after it that starts at most at hi.
			for k := int(tab[s.lo]); k < len(cuts) && cuts[k] <= s.hi; k++ {
				bm[k].set(i)
			}
		}
	}
	return nil
}

// prefixes compiles an address field into a multibit trie (16 bits, then 8
// per level) whose leaves are classes: class 0 is "no rule's prefix", class
// k the k-th distinct prefix by length, and a leaf holds the class of the
// longest prefix containing it. A class's bitmap has the rules whose prefix
// contains that class's prefix, and the rules without one. With at most 64
// rules an IPv4 field gets the two-level trie of wideTries instead.
func (c *classifier) prefixes(fld int, rules []*Rule, v4 bool, get func(*Rule) netip.Prefix) error {
	var ps []netip.Prefix
	for _, r := range rules {
		if p := get(r); p.IsValid() && p.Addr().Is4() == v4 && !slices.Contains(ps, p) {
			ps = append(ps, p)
		}
	}
	if len(ps) == 0 {
		return nil
	}
	slices.SortStableFunc(ps, func(a, b netip.Prefix) int { return cmp.Compare(a.Bits(), b.Bits()) })
	c.fields |= 1 << fld
	c.used[fld] = len(ps) + 1
	bm := c.bm[fld*bmField:]
	for i, r := range rules {
		p := get(r)
		if !p.IsValid() {
			for k := range len(ps) + 1 {
				bm[k].set(i)
			}
			continue
		}
		if p.Addr().Is4() != v4 {
			continue
		}
		for k, q := range ps {
			if p.Bits() <= q.Bits() && p.Contains(q.Addr()) {
				bm[k+1].set(i)
			}
		}
	}
	if v4 && len(rules) <= 64 {
		// The program reads the two-level trie (wideTries) instead.
		c.v4ps[fld-fldSrc4] = ps
		return nil
	}
	l1 := c.tab(fld, directSize)
	for k, p := range ps {
		if err := c.trieInsert(l1, p, uint16(k+1)); err != nil {
			return err
		}
	}
	return nil
}

// wideTries builds the IPv4 fields' two-level tries (20 + 12 bits) from
// their prefixes, shortest first, so that a longer prefix overwrites a
// shorter one and a new chunk starts out as the entry it replaces.
func (c *classifier) wideTries() error {
	for f, ps := range c.v4ps {
		if len(ps) == 0 {
			continue
		}
		l1 := make([]uint16, w4L1)
		for k, p := range ps {
			class := uint16(k + 1)
			a := binary.BigEndian.Uint32(p.Addr().AsSlice())
			if p.Bits() <= 20 {
				start := a >> 12
				for i := start; i < start+1<<(20-p.Bits()); i++ {
					l1[i] = class
				}
				continue
			}
			e := l1[a>>12]
			if e&tabExt == 0 {
				var err error
				if e, err = newChunk(&c.w4pool, e, w4Chunk, w4Chunks, "IPv4 address tries"); err != nil {
					return err
				}
				l1[a>>12] = e
			}
			start := int(e&^tabExt)*w4Chunk + int(a&0xfff)
			for i := start; i < start+1<<(32-p.Bits()); i++ {
				c.w4pool[i] = class
			}
		}
		c.w4[f] = l1
	}
	return nil
}

// newChunk appends a trie chunk of size entries to pool, each e (the leaf
// it replaces), and returns the entry that points to it; ErrCapacity past
// max chunks.
func newChunk(pool *[]uint16, e uint16, size, max int, what string) (uint16, error) {
	chunk := len(*pool) / size
	if chunk == max {
		return 0, fmt.Errorf("compound rules: %s need more than %d chunks: %w", what, max, ErrCapacity)
	}
	*pool = append(*pool, slices.Repeat([]uint16{e}, size)...)
	return tabExt | uint16(chunk), nil
}

// trieInsert sets the leaves covered by p to class. Prefixes must come
// shortest first, so that a longer one overwrites a shorter one and a new
// chunk starts out as the leaf it replaces.
func (c *classifier) trieInsert(l1 []uint16, p netip.Prefix, class uint16) error {
	a := p.Addr().AsSlice()
	bits := p.Bits()
	first := int(a[0])<<8 | int(a[1])
	if bits <= 16 {
		n := 1 << (16 - bits)
		start := first &^ (n - 1)
		for i := start; i < start+n; i++ {
			l1[i] = class
		}
		return nil
	}
	// The entry to descend through, as an index: into l1, or into the pool
	// (which append may move).
	inL1, at := true, first
	get := func() uint16 {
		if inL1 {
			return l1[at]
		}
		return c.pool[at]
	}
	for b := 2; ; b++ {
		e := get()
		if e&tabExt == 0 {
			var err error
			if e, err = newChunk(&c.pool, e, trieChunk, tabChunks, "address tries"); err != nil {
				return err
			}
			if inL1 {
				l1[at] = e
			} else {
				c.pool[at] = e
			}
		}
		base := int(e&^tabExt) * trieChunk
		if bits <= 8*(b+1) { // p ends in byte b: a range of this chunk
			n := 1 << (8*(b+1) - bits)
			start := base + int(a[b])&^(n-1)
			for i := start; i < start+n; i++ {
				c.pool[i] = class
			}
			return nil
		}
		inL1, at = false, base+int(a[b])
	}
}

// prefixIndex maps slot keys to uint32s: an open-addressing hash table
// with linear probing, no pointers and no allocation per entry, so that a
// million entries cost tens of milliseconds, not hundreds. Values must not
// be 0 (0 marks an empty slot).
type prefixIndex struct {
	keys []slotKey
	vals []uint32
	n    int
}

func newPrefixIndex(n int) *prefixIndex {
	size := 16
	for size < 2*n {
		size *= 2
	}
	return &prefixIndex{keys: make([]slotKey, size), vals: make([]uint32, size)}
}

func (x *prefixIndex) home(k slotKey) int {
	h := (k.hi ^ 0x9e3779b97f4a7c15) * 0xc2b2ae3d27d4eb4f
	h = (h ^ h>>31 ^ k.lo) * 0x165667b19e3779f9
	h ^= uint64(k.bits) | uint64(k.action)<<8
	if k.v6 {
		h ^= 1 << 16
	}
	if k.dst {
		h ^= 1 << 17
	}
	h *= 0x9e3779b97f4a7c15
	return int(h>>32) & (len(x.keys) - 1)
}

func (x *prefixIndex) get(k slotKey) (uint32, bool) {
	mask := len(x.keys) - 1
	for i := x.home(k); x.vals[i] != 0; i = (i + 1) & mask {
		if x.keys[i] == k {
			return x.vals[i], true
		}
	}
	return 0, false
}

// put sets k to v (v != 0).
func (x *prefixIndex) put(k slotKey, v uint32) {
	if 2*(x.n+1) > len(x.keys) {
		x.grow()
	}
	mask := len(x.keys) - 1
	i := x.home(k)
	for ; x.vals[i] != 0; i = (i + 1) & mask {
		if x.keys[i] == k {
			x.vals[i] = v
			return
		}
	}
	x.keys[i], x.vals[i] = k, v
	x.n++
}

// del removes k, moving later entries of its run back so that no search
// stops early (no tombstones).
func (x *prefixIndex) del(k slotKey) {
	mask := len(x.keys) - 1
	i := x.home(k)
	for ; x.vals[i] != 0; i = (i + 1) & mask {
		if x.keys[i] == k {
			break
		}
	}
	if x.vals[i] == 0 {
		return
	}
	x.n--
	for j := (i + 1) & mask; x.vals[j] != 0; j = (j + 1) & mask {
		// Move j to the hole at i if its home is not in (i, j].
		h := x.home(x.keys[j])
		if (j-h)&mask >= (j-i)&mask {
			x.keys[i], x.vals[i] = x.keys[j], x.vals[j]
			i = j
		}
	}
	x.keys[i], x.vals[i] = slotKey{}, 0
}

func (x *prefixIndex) grow() {
	old := *x
	*x = *newPrefixIndex(2 * len(old.keys))
	for i, v := range old.vals {
		if v != 0 {
			x.put(old.keys[i], v)
		}
	}
}
