package fastdrop

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"unsafe"

	"github.com/xdpdrop/xdpdrop/gen"
)

// matchField describes one match field of the rule language: how the
// parser reads it, how Rule.String writes it, what Rule.Validate checks
// about it, how the model matches it and how a rule record keeps it.
// matchFields holds one per field; the parser, String, Validate, needsIP,
// IsPrefixOnly, the model and encodeRecord/decodeRecordInto loop over it,
// so a new field is a new entry (and the C read of its bytes, its
// classifier, tests and docs: see doc.go).
type matchField struct {
	// name is the keyword, also the field's name in messages.
	name string
	// examples are rules that use the field, in canonical syntax; the
	// tests parse, print and evaluate them (TestMatchFields).
	examples []string
	// aliases are further keywords that set the field and take no value
	// token (the protocol names: "tcp" is "proto tcp"). A field's value
	// may be one of its own aliases ("proto tcp").
	aliases []string
	// flag: the field takes no value ("frag").
	flag bool
	// optional, for a flag: whether the next token is the field's value
	// after all ("frag first"), which parse then gets instead of the
	// keyword.
	optional func(v string) bool
	// sub: the field has no keyword of its own; another entry's parse
	// sets it (frag with bits). It is in no list of keywords or fields.
	sub bool
	// need is the message for the keyword without a value.
	need string
	// parse sets the field of r from v, its value token (or the alias
	// used), or returns the message for a bad value. "" is success.
	parse func(r *Rule, v string) string
	// twice, if set, is the message for the field given a second time,
	// checked after the second value is read (prev and v are the tokens
	// that gave the values); otherwise the message names the keyword and
	// is given before the value is read.
	twice func(prev, v string) string
	// at and store say where in a Rule the field is and how a set one is
	// told from a zero one (see matchField.isSet): a table of offsets
	// rather than of functions, because a *Rule given to a function value
	// escapes, and IsPrefixOnly and needsIP, called per rule on millions
	// of rules, would then allocate a copy of the Rule each time.
	at    uintptr
	store storeKind
	// text returns the field's words in canonical syntax ("src 10.0.0.0/8").
	text func(r *Rule) string
	// textPos is the field's place in Rule.String's canonical order,
	// which is older than this table and so is not the table's order.
	textPos int
	// ip: only an IPv4 or IPv6 frame can match the field; v6: only an
	// IPv6 frame.
	ip, v6 bool
	// frames: which IP frames can match the field, beyond ip (the
	// compiler's kindAllows).
	frames frameKind
	// direct: the classifiers look the field up by its value in the
	// frame, in a table of its own (nil for the address fields, which
	// have tries, and frag, which only the frame's kind decides).
	direct *directField
	// check is Rule.Validate's check of the field, nil if there is
	// nothing to check; it runs if the field is set, or always if
	// checkZero. Checks run in table order, then the checks of
	// combinations no one field owns (see Rule.Validate).
	check     func(r *Rule) error
	checkZero bool
	// match reports whether pkt matches r's field, which is set.
	match func(r *Rule, pkt *packet) bool
	// recFlag is the field's FD_REC_* bit in fd_rule_rec.flags: encode
	// runs and sets it if the field is set, decode runs if it is set. 0:
	// the record's value says itself whether the field is set (ether: 0),
	// and encode and decode always run.
	recFlag uint32
	// rec names the members of struct fd_rule_rec that hold the value,
	// at their offsets and widths (TestRecordLayout checks them against
	// the BTF of the object).
	rec []recMember
	// encode writes the field of r into the record b; decode reads it
	// back into r.
	encode func(b []byte, r *Rule)
	decode func(b []byte, r *Rule)
	// num: a numeric field (fields_num.go), its values; numRec where its
	// record keeps a value of one item.
	num    *numSpec
	numRec recNum
	// numAt is the offset of the field's Num in Nums (numeric fields and
	// proto's lists).
	numAt uintptr
}

// frameKind is what a frame must be for a field to match it, beyond IP.
type frameKind uint8

const (
	framesAny      frameKind = iota
	framesPorts              // TCP or UDP, not a non-first fragment
	framesNonfirst           // a non-first fragment
	framesFirst              // not a non-first fragment (its L4 header is read)
)

// directField is a field of FD_DIRECT_FIELDS in bpf/fastdrop.h: its value
// in the frame (bits wide) indexes a table of its own, which the compiler
// (classifier.direct) fills from the values each rule allows. The C list
// has it under the same name, upper case, with the same bits
// (TestDirectFields).
type directField struct {
	fld  int // enum fd_field
	off  int // FD_DIR_<NAME>: its table in fd_cls_half.tab and .b64
	bits int
	// spans appends the values r's field (which is set) allows, as
	// inclusive ranges, to dst.
	spans func(r *Rule, dst []span) []span
}

// directFieldOf returns the direct field whose enum fd_field is fld, or nil.
func directFieldOf(fld int) *directField {
	for i := range matchFields {
		if d := matchFields[i].direct; d != nil && d.fld == fld {
			return d
		}
	}
	return nil
}

// recMember is a member of struct fd_rule_rec: its name, offset and width.
type recMember struct {
	name       string
	off, width int
}

// storeKind is the Go type of a field in Rule, and so what zero means.
type storeKind uint8

const (
	storePrefix storeKind = iota + 1 // netip.Prefix; set if valid
	storePtr                         // a pointer (*PortRange, ...); set if not nil
	storeU16                         // uint16; set if not 0
	storeBool                        // bool; set if true (proto: HasProto)
	storeU8                          // a byte; set if not 0 (len: its Op)
	storeB2                          // two bytes; set if either is not 0 (FragBits)
	storeNum                         // a Num in Rule.Nums (at: its offset there); set if it has items
	storeProto                       // proto: HasProto, or a list in Rule.Nums.Proto
)

// matchFields are the match fields, in the order messages list them and
// Rule.Validate checks them. init sets it, since entries refer to the
// table (which a variable's initializer may not); nothing changes it.
var matchFields [17]matchField

func init() {
	matchFields = [...]matchField{
		prefixField("src", unsafe.Offsetof(Rule{}.Src), recPlace{recFlagSrc, recSrcLen, recSrc, recSrcOff}, func(r *Rule) *netip.Prefix { return &r.Src }, func(r *Rule) *uint8 { return &r.SrcOff }, func(p *packet) netip.Addr { return p.src }, 5),
		prefixField("dst", unsafe.Offsetof(Rule{}.Dst), recPlace{recFlagDst, recDstLen, recDst, recDstOff}, func(r *Rule) *netip.Prefix { return &r.Dst }, func(r *Rule) *uint8 { return &r.DstOff }, func(p *packet) netip.Addr { return p.dst }, 7),
		protoField(),
		portField("sport", unsafe.Offsetof(Nums{}.Sport), recFlagSport, recSport, fldSport, int(gen.FastdropFdDirectFD_DIR_SPORT), func(p *packet) uint16 { return p.sport }, 6),
		portField("dport", unsafe.Offsetof(Nums{}.Dport), recFlagDport, recDport, fldDport, int(gen.FastdropFdDirectFD_DIR_DPORT), func(p *packet) uint16 { return p.dport }, 8),
		{
			name:     "ether",
			examples: []string{"drop ether arp", "pass ether 0x1234", "drop ether ipv4 udp dst 10.0.0.0/8"},
			need:     "ether needs a value (want arp, lldp, ipv4, ipv6 or a hex EtherType like 0x88cc)",
			parse: func(r *Rule, v string) string {
				t, msg := parseEtherType(v)
				if msg != "" {
					return fmt.Sprintf("ether %s: %s", clipped(v), msg)
				}
				r.EtherType = t
				return ""
			},
			at:      unsafe.Offsetof(Rule{}.EtherType),
			store:   storeU16,
			text:    func(r *Rule) string { return "ether " + etherName(r.EtherType) },
			textPos: 0,
			check: func(r *Rule) error {
				switch r.EtherType {
				case 0, EtherTypeIPv4, EtherTypeIPv6:
				case EtherTypeVLAN, EtherTypeQinQ:
					return fmt.Errorf("ether 0x%04x never matches: VLAN tags are skipped and ether matches the EtherType after them", r.EtherType)
				default:
					if r.needsIP() {
						return fmt.Errorf("ether %s never matches a rule with %s: those need an IPv4 or IPv6 frame", etherName(r.EtherType), ipFieldList())
					}
				}
				fam := r.family()
				if r.EtherType == EtherTypeIPv4 && fam == 6 || r.EtherType == EtherTypeIPv6 && fam == 4 {
					return fmt.Errorf("ether %s never matches an IPv%d prefix", etherName(r.EtherType), fam)
				}
				return nil
			},
			match: func(r *Rule, pkt *packet) bool { return r.EtherType == pkt.etherType },
			direct: &directField{fld: fldEther, off: int(gen.FastdropFdDirectFD_DIR_ETHER), bits: 16,
				spans: func(r *Rule, dst []span) []span { return append(dst, span{int(r.EtherType), int(r.EtherType)}) }},
			rec:    []recMember{{"ether", recEther, 2}},
			encode: func(b []byte, r *Rule) { binary.LittleEndian.PutUint16(b[recEther:], r.EtherType) },
			decode: func(b []byte, r *Rule) { r.EtherType = binary.LittleEndian.Uint16(b[recEther:]) },
		},
		{
			name:     "frag",
			examples: []string{"drop frag", "drop udp src 192.0.2.0/24 frag"},
			flag:     true,
			// frag with bits (frag first) is the next entry's.
			optional: isFragValue,
			parse: func(r *Rule, v string) string {
				if v != "frag" {
					return fragBitsField().parse(r, v)
				}
				r.Fragment = true
				return ""
			},
			at:      unsafe.Offsetof(Rule{}.Fragment),
			store:   storeBool,
			text:    func(*Rule) string { return "frag" },
			textPos: 9,
			ip:      true,
			frames:  framesNonfirst,
			match:   func(_ *Rule, pkt *packet) bool { return pkt.isIP && pkt.fragment },
			recFlag: recFlagFrag,
			encode:  func([]byte, *Rule) {},
			decode:  func(_ []byte, r *Rule) { r.Fragment = true },
		},
		numEntry(numOpts{
			spec:     numSpec{name: "ttl", max: 255, writeMax: 255, want: "a TTL or hop limit 0-255", noun: "a TTL", rng: "0-2", cmp: "<3", list: "1,2,64"},
			at:       unsafe.Offsetof(Nums{}.TTL),
			examples: []string{"drop udp ttl 0-2", "drop src 192.0.2.0/24 ttl 64", "pass ether ipv6 ttl 255", "drop frag ttl 1", "drop udp ttl <3", "drop ttl >=250", "drop ttl >1", "drop ttl <=64", "drop ttl 1,2,64", "drop ttl !64,128,255", "drop ttl <3,255"},
			textPos:  10,
			ip:       true,
			value:    func(p *packet) (uint32, bool) { return uint32(p.ttl), p.isIP },
			fld:      int(gen.FastdropFdFieldFD_FLD_TTL), dir: int(gen.FastdropFdDirectFD_DIR_TTL), bits: 8,
			recFlag: uint32(gen.FastdropFdRecFlagsFD_REC_TTL),
			rec:     recNum{lo: recTTL, hi: recTTL + 1, width: 1, op: recTTLOp, named: -1},
		}),
		{
			name:     "flags",
			examples: []string{"drop tcp flags syn,!ack dport 80", "drop tcp flags ==syn", "drop tcp flags fin,psh,urg", "pass tcp flags ==none", "drop tcp flags !syn,!rst,!ack src 2001:db8::/32"},
			need:     "flags needs a value (" + wantTCPFlags + ")",
			parse: func(r *Rule, v string) string {
				fl, msg := parseTCPFlags(v)
				if msg != "" {
					return fmt.Sprintf("flags %s: %s", clipped(v), msg)
				}
				r.TCPFlags = fl
				return ""
			},
			at:      unsafe.Offsetof(Rule{}.TCPFlags),
			store:   storePtr,
			text:    func(r *Rule) string { return "flags " + r.TCPFlags.String() },
			textPos: 2,
			ip:      true,
			frames:  framesPorts,
			check: func(r *Rule) error {
				fl := r.TCPFlags
				if !fl.Exact && fl.Set|fl.Clear == 0 {
					return errors.New("flags names no flag (" + wantTCPFlags + ")")
				}
				if fl.Set&fl.Clear != 0 || fl.Exact && fl.Clear != 0 {
					return fmt.Errorf("flags %s: a flag both set and clear never matches", fl)
				}
				if !r.protoOnly(func(p uint8) bool { return p == ProtoTCP }) {
					return fmt.Errorf("flags needs protocol tcp (write e.g. \"tcp flags %s\")", fl)
				}
				if r.Fragment {
					return errors.New("frag never matches together with flags: non-first fragments carry no TCP header")
				}
				return nil
			},
			match: func(r *Rule, pkt *packet) bool {
				return pkt.hasPorts && pkt.proto == ProtoTCP && r.TCPFlags.Matches(pkt.tcpFlags)
			},
			direct: &directField{fld: int(gen.FastdropFdFieldFD_FLD_FLAGS), off: int(gen.FastdropFdDirectFD_DIR_FLAGS), bits: 8,
				spans: func(r *Rule, dst []span) []span {
					return valueSpans(dst, 256, func(v int) bool { return r.TCPFlags.Matches(uint8(v)) })
				}},
			recFlag: uint32(gen.FastdropFdRecFlagsFD_REC_FLAGS),
			rec:     []recMember{{"tcp_set", recTCPSet, 1}, {"tcp_clear", recTCPSet + 1, 1}, {"tcp_exact", recTCPSet + 2, 1}},
			encode: func(b []byte, r *Rule) {
				b[recTCPSet], b[recTCPSet+1], b[recTCPSet+2] = r.TCPFlags.Set, r.TCPFlags.Clear, 0
				if r.TCPFlags.Exact {
					b[recTCPSet+2] = 1
				}
			},
			decode: func(b []byte, r *Rule) {
				r.TCPFlags = &TCPFlags{Set: b[recTCPSet], Clear: b[recTCPSet+1], Exact: b[recTCPSet+2] != 0}
			},
		},
		numEntry(numOpts{
			spec:     numSpec{name: "queue", max: uint32(MaxQueue) + 1, writeMax: uint32(MaxQueue), want: fmt.Sprintf("an rx queue 0-%d", MaxQueue), noun: "an rx queue", rng: "0-3", cmp: ">=4", list: "0,2"},
			at:       unsafe.Offsetof(Nums{}.Queue),
			examples: []string{"redirect udp dport 53 queue 0-3", "drop queue 7", "pass ether arp queue 1", "drop queue 0,2,5-7", "drop queue !0", "drop queue >=4"},
			textPos:  12,
			// Queues past MaxQueue are one value, MaxQueue+1, which no
			// written range reaches but a negation or >= does.
			value: func(p *packet) (uint32, bool) { return min(p.queue, uint32(MaxQueue+1)), true },
			fld:   fldQueue, dir: int(gen.FastdropFdDirectFD_DIR_QUEUE), bits: 9,
			recFlag: recFlagQueue,
			rec:     recNum{lo: recQueue, hi: recQueue + 2, width: 2, op: -1, named: -1},
		}),
		numEntry(numOpts{
			spec: numSpec{name: "dscp", max: 63, writeMax: 63, want: "a codepoint 0-63 or a name: ef, af11 to af43, cs0 to cs7", noun: "a codepoint", rng: "8-15", cmp: ">=32", list: "ef,af41",
				over: func(n uint32) string {
					return fmt.Sprintf("%d is not a codepoint: DSCP has 6 bits, 0-63 (the TOS byte %d is DSCP %d)", n, n, (n&255)>>2)
				},
				named: func(_ *Rule, v uint32) string { return dscpName(uint8(v)) },
				byName: func(_ *Rule, s string) (uint32, string) {
					for v := range uint8(64) {
						if dscpName(v) == s {
							return uint32(v), ""
						}
					}
					return 0, fmt.Sprintf("unknown codepoint name %q (%s)", clipped(s), wantDSCP)
				}},
			at:       unsafe.Offsetof(Nums{}.DSCP),
			examples: []string{"drop dscp 46", "drop dscp ef", "pass udp dscp af41", "drop src 2001:db8::/32 dscp cs1", "drop dscp 8-15", "drop dscp >=32", "drop dscp <8", "drop dscp ef,af41,cs1", "drop dscp !0"},
			textPos:  11,
			ip:       true,
			value:    func(p *packet) (uint32, bool) { return uint32(p.dscp), p.isIP },
			fld:      int(gen.FastdropFdFieldFD_FLD_DSCP), dir: int(gen.FastdropFdDirectFD_DIR_DSCP), bits: 6,
			recFlag: uint32(gen.FastdropFdRecFlagsFD_REC_DSCP),
			rec:     recNum{lo: recDSCP, hi: recDSCP + 1, width: 1, op: recDSCPOp, named: recDSCP + 2},
		}),
		icmpField("type", unsafe.Offsetof(Nums{}.Type), 3),
		icmpField("code", unsafe.Offsetof(Nums{}.Code), 4),
		lenField(),
		fragBitsField(),
		portEitherField(),
		flowLabelField(),
	}
}

// icmpTypeNames are the names of ICMP types (RFC 792) and ICMPv6 types
// (RFC 4443, RFC 4861), as nftables has them.
var icmpTypeNames = map[uint8]map[string]uint8{
	ProtoICMP: {"echo-reply": 0, "destination-unreachable": 3, "source-quench": 4, "redirect": 5, "echo-request": 8,
		"router-advertisement": 9, "router-solicitation": 10, "time-exceeded": 11, "parameter-problem": 12,
		"timestamp-request": 13, "timestamp-reply": 14},
	ProtoICMPv6: {"destination-unreachable": 1, "packet-too-big": 2, "time-exceeded": 3, "parameter-problem": 4,
		"echo-request": 128, "echo-reply": 129, "nd-router-solicit": 133, "nd-router-advert": 134,
		"nd-neighbor-solicit": 135, "nd-neighbor-advert": 136, "nd-redirect": 137},
}

// icmpTypeName returns the name of type v of protocol proto, "" if none.
func icmpTypeName(proto, v uint8) string {
	for name, n := range icmpTypeNames[proto] {
		if n == v {
			return name
		}
	}
	return ""
}

// icmpField is the entry of type or code: the ICMP or ICMPv6 header's
// first (type) or second (code) byte.
func icmpField(name string, at uintptr, textPos int) matchField {
	o := numOpts{
		spec:     numSpec{name: name, max: 255, writeMax: 255, want: "a number 0-255", rng: "3-5", cmp: ">=128", list: "3,11"},
		at:       at,
		examples: []string{"drop icmp " + name + " 3", "drop icmpv6 " + name + " 128-129", "pass icmp " + name + " 0 src 192.0.2.0/24", "drop icmp " + name + " >=128", "drop icmpv6 " + name + " <4", "drop icmp " + name + " 0,3-5,11", "drop icmp " + name + " !0"},
		textPos:  textPos,
		ip:       true,
		frames:   framesFirst,
		fld:      int(gen.FastdropFdFieldFD_FLD_CODE), dir: int(gen.FastdropFdDirectFD_DIR_CODE), bits: 8,
		recFlag: uint32(gen.FastdropFdRecFlagsFD_REC_CODE),
		rec:     recNum{lo: recCode, hi: recCode + 1, width: 1, op: recCodeOp, named: -1},
		value:   func(p *packet) (uint32, bool) { return uint32(p.icmpCode), p.hasICMP },
	}
	if name == "type" {
		o.spec.want = "a number 0-255 (after icmp or icmpv6 also a name such as echo-request)"
		o.spec.list = "0,8"
		o.spec.named = func(r *Rule, v uint32) string { return icmpTypeName(r.Proto, uint8(v)) }
		o.spec.byName = func(r *Rule, s string) (uint32, string) {
			if !r.HasProto || icmpTypeNames[r.Proto] == nil {
				return 0, fmt.Sprintf("write icmp or icmpv6 before a type name (its number depends on the protocol), or the type's number, not %q", clipped(s))
			}
			n, ok := icmpTypeNames[r.Proto][s]
			if !ok {
				names := make([]string, 0, len(icmpTypeNames[r.Proto]))
				for k := range icmpTypeNames[r.Proto] {
					names = append(names, k)
				}
				slices.Sort(names)
				return 0, fmt.Sprintf("unknown %s type %q (want a number 0-255 or one of %s)", protoName(r.Proto), clipped(s), strings.Join(names, ", "))
			}
			return uint32(n), ""
		}
		o.examples = append(o.examples, "drop icmp type echo-request", "drop icmpv6 type nd-neighbor-solicit", "drop icmp type 3 code 4", "drop icmp type echo-request,echo-reply", "drop icmpv6 type !echo-request,130-132")
		o.fld, o.dir = int(gen.FastdropFdFieldFD_FLD_TYPE), int(gen.FastdropFdDirectFD_DIR_TYPE)
		o.recFlag = uint32(gen.FastdropFdRecFlagsFD_REC_TYPE)
		o.rec = recNum{lo: recType, hi: recType + 1, width: 1, op: recTypeOp, named: recTypeNamed}
		o.value = func(p *packet) (uint32, bool) { return uint32(p.icmpType), p.hasICMP }
	}
	o.check = func(r *Rule, n *Num) error {
		if !r.protoOnly(func(p uint8) bool { return icmpTypeNames[p] != nil }) {
			return fmt.Errorf("%s needs protocol icmp or icmpv6 (write e.g. \"icmp %s %s\")", name, name, o.spec.text(r, n))
		}
		if r.Fragment {
			return fmt.Errorf("frag never matches together with %s: non-first fragments carry no ICMP header", name)
		}
		return nil
	}
	return numEntry(o)
}

const wantDSCP = "want a codepoint 0-63, a range like 8-15, or a name: ef, af11 to af43, cs0 to cs7"

// dscpName returns the name of codepoint v, "" if it has none.
func dscpName(v uint8) string {
	switch {
	case v == 46:
		return "ef"
	case v%8 == 0:
		return "cs" + strconv.Itoa(int(v/8))
	case v/8 >= 1 && v/8 <= 4 && v%8 >= 2 && v%8 <= 6 && v%2 == 0:
		return "af" + strconv.Itoa(int(v/8)) + strconv.Itoa(int(v%8/2))
	}
	return ""
}

// valueSpans appends the values v < n that ok allows to dst, as spans.
func valueSpans(dst []span, n int, ok func(v int) bool) []span {
	for v := 0; v < n; v++ {
		if !ok(v) {
			continue
		}
		if k := len(dst) - 1; k >= 0 && dst[k].hi == v-1 {
			dst[k].hi = v
		} else {
			dst = append(dst, span{v, v})
		}
	}
	return dst
}

// TCPFlags is what the flags field matches in a TCP header's byte 13
// (CWR, ECE, URG, ACK, PSH, RST, SYN, FIN from the top bit down), with
// FlowSpec's bitmask semantics (RFC 8955 4.2.2.9): every bit of Set set
// and every bit of Clear clear, the others any; with Exact, the byte is
// Set and Clear is 0.
type TCPFlags struct {
	Set, Clear uint8
	Exact      bool
}

// TCP flag bits, in the order String writes them.
var tcpFlagNames = [8]string{"fin", "syn", "rst", "psh", "ack", "urg", "ece", "cwr"}

const wantTCPFlags = "want flag names fin, syn, rst, psh, ack, urg, ece, cwr separated by commas, each set, or clear with !, as in syn,!ack; or == and the only flags set, as in ==syn or ==none"

// Matches reports whether a TCP flags byte matches f.
func (f TCPFlags) Matches(b uint8) bool {
	if f.Exact {
		return b == f.Set
	}
	return b&f.Set == f.Set && b&f.Clear == 0
}

func (f TCPFlags) String() string {
	var b strings.Builder
	if f.Exact {
		b.WriteString("==")
		if f.Set == 0 {
			b.WriteString("none")
		}
	}
	for i, name := range tcpFlagNames {
		bit := uint8(1) << i
		if f.Set&bit == 0 && f.Clear&bit == 0 {
			continue
		}
		if b.Len() > 0 && b.String() != "==" {
			b.WriteByte(',')
		}
		if f.Clear&bit != 0 {
			b.WriteByte('!')
		}
		b.WriteString(name)
	}
	return b.String()
}

// parseTCPFlags parses flags' value: NAME[,NAME...] where a NAME may have
// a leading ! (clear), or == and names (exact), or ==none.
func parseTCPFlags(s string) (*TCPFlags, string) {
	f := &TCPFlags{}
	rest, exact := strings.CutPrefix(s, "==")
	f.Exact = exact
	if exact && rest == "none" {
		return f, ""
	}
	for _, name := range strings.Split(rest, ",") {
		clear := false
		if n, ok := strings.CutPrefix(name, "!"); ok {
			if exact {
				return nil, "! has no place after == (the flags == does not name are clear): write ==syn, or syn,!ack for some flags set and some clear"
			}
			name, clear = n, true
		}
		i := slices.Index(tcpFlagNames[:], name)
		if i < 0 {
			return nil, fmt.Sprintf("unknown TCP flag %q (%s)", clipped(name), wantTCPFlags)
		}
		bit := uint8(1) << i
		if (f.Set|f.Clear)&bit != 0 {
			return nil, fmt.Sprintf("%s given twice (name each flag once)", name)
		}
		if clear {
			f.Clear |= bit
		} else {
			f.Set |= bit
		}
	}
	return f, ""
}

// prefixField is the entry of an address field, src or dst: a prefix,
// IPv4 or IPv6, matched against the frame's address that addr returns.
// An IPv6 prefix may have an offset (off: Rule.SrcOff or DstOff), written
// ADDR/LEN/OFF: then only bits OFF to LEN-1 of the address are compared
// (FlowSpec types 1 and 2, RFC 8956 section 3.1).
func prefixField(name string, at uintptr, rf recPlace, get func(*Rule) *netip.Prefix, off func(*Rule) *uint8, addr func(*packet) netip.Addr, textPos int) matchField {
	return matchField{
		name:     name,
		examples: []string{"drop " + name + " 192.0.2.0/24", "pass tcp " + name + " 2001:db8::1/128", "drop " + name + " 0.0.0.0/0 frag", "drop " + name + " ::1:1234:5678:9800:0/104/60", "drop udp " + name + " 0:0:db8::/48/16"},
		need:     fmt.Sprintf("%s needs a value (want an address or prefix, e.g. %s 192.0.2.0/24, %s 2001:db8::/32 or %s 192.0.2.1)", name, name, name, name),
		parse: func(r *Rule, v string) string {
			pv, o, msg := cutOffset(v)
			if msg != "" {
				return fmt.Sprintf("%s %s: %s", name, clipped(v), msg)
			}
			pfx, msg := parsePrefix(pv)
			if msg != "" {
				return fmt.Sprintf("%s %s: %s", name, clipped(v), msg)
			}
			if o >= 0 && pfx.Addr().Is4() {
				return fmt.Sprintf("%s %s: IPv4 prefixes have no offset (RFC 8955 matches them from bit 0; offsets are IPv6's, RFC 8956): write %s %s", name, clipped(v), name, pv)
			}
			*get(r) = pfx
			*off(r) = uint8(max(o, 0))
			return ""
		},
		at:    at,
		store: storePrefix,
		text: func(r *Rule) string {
			if o := *off(r); o != 0 {
				return name + " " + get(r).String() + "/" + strconv.Itoa(int(o))
			}
			return name + " " + get(r).String()
		},
		textPos:   textPos,
		ip:        true,
		checkZero: true, // an invalid prefix is not set, and is refused
		check: func(r *Rule) error {
			p := *get(r)
			if o := int(*off(r)); o != 0 {
				if err := validateOffset(name, p, o); err != nil {
					return err
				}
			} else if err := validatePrefix(name, p); err != nil {
				return err
			}
			// A frame has one family: prefixes of two never match
			// together. The later field says so, naming both.
			for i := range matchFields {
				f := &matchFields[i]
				if f.name == name {
					break
				}
				if f.store != storePrefix {
					continue
				}
				if q := *f.prefixOf(r); q.IsValid() && p.IsValid() && q.Addr().Is4() != p.Addr().Is4() {
					return fmt.Errorf("%s %s and %s %s are of different address families; a frame is either IPv4 or IPv6, so write two rules", f.name, q, name, p)
				}
			}
			return nil
		},
		match: func(r *Rule, pkt *packet) bool {
			return pkt.isIP && offsetContains(*get(r), int(*off(r)), addr(pkt))
		},
		recFlag: rf.flag,
		rec:     []recMember{{name + "_len", rf.len, 1}, {"family", recFamily, 1}, {name, rf.val, 16}, {name + "_off", rf.off, 1}},
		encode: func(b []byte, r *Rule) {
			p := *get(r)
			b[rf.len] = uint8(p.Bits())
			b[rf.off] = *off(r)
			if p.Addr().Is4() {
				b[recFamily] = 4
				a := p.Addr().As4()
				copy(b[rf.val:], a[:])
			} else {
				b[recFamily] = 6
				a := p.Addr().As16()
				copy(b[rf.val:], a[:])
			}
		},
		// The family is the record's, which both prefixes share.
		decode: func(b []byte, r *Rule) {
			var a netip.Addr
			if b[recFamily] == 4 {
				a = netip.AddrFrom4([4]byte(b[rf.val : rf.val+4]))
			} else {
				a = netip.AddrFrom16([16]byte(b[rf.val : rf.val+16]))
			}
			*get(r) = netip.PrefixFrom(a, int(b[rf.len]))
			*off(r) = b[rf.off]
		},
	}
}

// cutOffset splits "ADDR/LEN/OFF" into "ADDR/LEN" and OFF; -1 if v has no
// offset. The offset is checked against the prefix by validateOffset.
func cutOffset(v string) (string, int, string) {
	if strings.Count(v, "/") != 2 {
		return v, -1, ""
	}
	i := strings.LastIndexByte(v, '/')
	o, ok := parseUint(v[i+1:], 3)
	if !ok || o > 128 {
		return "", 0, fmt.Sprintf("prefix offset %q out of range (want ADDR/LEN/OFFSET with OFFSET 0 to LEN-1, as in 2001:db8::/64/32)", clipped(v[i+1:]))
	}
	return v[:i], o, ""
}

// validateOffset checks an IPv6 prefix p with offset o (not 0): the
// offset is less than the length (RFC 8956 3.1: offset < length < 129),
// and the address has no bit set outside bits o to p.Bits()-1.
func validateOffset(field string, p netip.Prefix, o int) error {
	if !p.IsValid() || !p.Addr().Is6() || p.Addr().Zone() != "" {
		return fmt.Errorf("%s %s/%d: only an IPv6 prefix has an offset (RFC 8956); write the prefix without one", field, p, o)
	}
	if o >= p.Bits() {
		return fmt.Errorf("%s %s/%d: the offset must be less than the prefix length (bits %d to %d are compared; RFC 8956 3.1): write e.g. %s/%d/%d", field, p, o, o, p.Bits()-1, p.Addr(), max(p.Bits(), o+1), o)
	}
	a := p.Addr().As16()
	hi, lo := binary.BigEndian.Uint64(a[:8]), binary.BigEndian.Uint64(a[8:])
	mhi, mlo := offsetMask(o, p.Bits())
	if hi&^mhi != 0 || lo&^mlo != 0 {
		var m [16]byte
		binary.BigEndian.PutUint64(m[:8], hi&mhi)
		binary.BigEndian.PutUint64(m[8:], lo&mlo)
		return fmt.Errorf("%s %s/%d has bits set outside bits %d to %d, which are all it compares; write %s/%d/%d", field, p, o, o, p.Bits()-1, netip.AddrFrom16(m), p.Bits(), o)
	}
	return nil
}

// offsetMask returns the 128-bit mask of bits o to bits-1 (bit 0 the most
// significant) as two big-endian halves.
func offsetMask(o, bits int) (hi, lo uint64) {
	top := func(n int) (uint64, uint64) { // the first n bits
		switch {
		case n <= 0:
			return 0, 0
		case n < 64:
			return ^uint64(0) << (64 - n), 0
		case n < 128:
			return ^uint64(0), ^uint64(0) << (128 - n)
		}
		return ^uint64(0), ^uint64(0)
	}
	h1, l1 := top(bits)
	h0, l0 := top(o)
	return h1 &^ h0, l1 &^ l0
}

// offsetContains reports whether a has bits o to p.Bits()-1 of p (all of
// p with o = 0).
func offsetContains(p netip.Prefix, o int, a netip.Addr) bool {
	if o == 0 {
		return p.Contains(a)
	}
	if !a.Is6() {
		return false
	}
	x, y := a.As16(), p.Addr().As16()
	mhi, mlo := offsetMask(o, p.Bits())
	return binary.BigEndian.Uint64(x[:8])&mhi == binary.BigEndian.Uint64(y[:8])&mhi &&
		binary.BigEndian.Uint64(x[8:])&mlo == binary.BigEndian.Uint64(y[8:])&mlo
}

// recPlace is where a field is in struct fd_rule_rec: its flag, and the
// offsets of its prefix length (address fields) and of its value.
type recPlace struct {
	flag          uint32
	len, val, off int
}

// flowLabelField is the entry of flowlabel: the IPv6 flow label (FlowSpec
// type 13, RFC 8956 3.7), 20 bits, a direct field.
func flowLabelField() matchField {
	return numEntry(numOpts{
		spec: numSpec{name: "flowlabel", max: 1<<20 - 1, writeMax: 1<<20 - 1, hex: true,
			want: "an IPv6 flow label 0-1048575 or 0x0-0xfffff", noun: "a flow label", rng: "0x100-0x1ff", cmp: "<0x100", list: "0x12345,7"},
		at:       unsafe.Offsetof(Nums{}.FlowLabel),
		examples: []string{"drop flowlabel 0x12345", "drop src 2001:db8::/32 flowlabel 0-15", "pass udp flowlabel !0", "drop flowlabel 0x100-0x1ff,0xfffff", "drop tcp dport 80 flowlabel >=0x80000", "drop ether ipv6 flowlabel <16,1048575"},
		textPos:  16,
		ip:       true,
		v6:       true,
		check: func(r *Rule, n *Num) error {
			if r.family() == 4 {
				return fmt.Errorf("flowlabel is IPv6's (RFC 8956): IPv4 has no flow label, so an IPv4 rule with one never matches; leave it out, or write the rule for IPv6 (an IPv6 src or dst, or ether ipv6)")
			}
			if r.protoOnly(func(p uint8) bool { return p == ProtoICMP }) {
				return fmt.Errorf("flowlabel never matches with icmp (IPv4's ICMP): write icmpv6")
			}
			return nil
		},
		value: func(p *packet) (uint32, bool) { return p.flowLabel, p.isIP && p.src.Is6() },
		fld:   int(gen.FastdropFdFieldFD_FLD_FLOWLABEL), dir: int(gen.FastdropFdDirectFD_DIR_FLOWLABEL), bits: 20,
		recFlag: uint32(gen.FastdropFdRecFlagsFD_REC_FLOWLABEL),
		rec:     recNum{never: true},
	})
}

// protoSpec is the numSpec of proto's lists.
var protoSpec = numSpec{name: "proto", max: 255, writeMax: 255, want: "tcp, udp, icmp, icmpv6 or a protocol number 0-255", noun: "a protocol", rng: "1-5", cmp: ">=128", list: "tcp,udp",
	named: func(_ *Rule, v uint32) string { return protoName(uint8(v)) },
	byName: func(_ *Rule, s string) (uint32, string) {
		if n, ok := parseProto(s); ok {
			return uint32(n), ""
		}
		return 0, fmt.Sprintf("unknown protocol %q (want tcp, udp, icmp, icmpv6 or a protocol number 0-255)", clipped(s))
	}}

// protoField is the entry of proto: one protocol (Rule.Proto with
// HasProto, as most rules have it: "tcp", "proto 47"), or a list,
// range, comparison or negation of them (Rule.Nums.Proto: "proto
// tcp,udp", "proto !6").
func protoField() matchField {
	list := func(r *Rule) *Num {
		if r.HasProto || r.Nums == nil || !r.Nums.Proto.IsSet() {
			return nil
		}
		return &r.Nums.Proto
	}
	return matchField{
		name:     "proto",
		examples: []string{"drop tcp", "pass proto 47", "drop ether ipv6 icmpv6", "drop proto 44 src 2001:db8::/32 frag", "drop proto tcp,udp", "drop proto !tcp,udp,1", "drop proto 132,tcp dst 192.0.2.0/24", "pass proto >=143", "drop proto tcp,udp dport 53"},
		aliases:  []string{"tcp", "udp", "icmp", "icmpv6"},
		need:     "proto needs a value (want tcp, udp, icmp, icmpv6 or a protocol number 0-255, or a list like tcp,udp)",
		parse: func(r *Rule, v string) string {
			if n, ok := parseProto(v); ok {
				r.Proto, r.HasProto = n, true
				return ""
			}
			if !strings.ContainsAny(v, ",!<>-") {
				return fmt.Sprintf("unknown protocol %q (want tcp, udp, icmp, icmpv6 or a protocol number 0-255, or a list like tcp,udp)", clipped(v))
			}
			n, msg := parseNum(&protoSpec, r, v)
			if msg != "" {
				return fmt.Sprintf("proto %s: %s", clipped(v), msg)
			}
			r.nums().Proto = n
			return ""
		},
		twice: func(prev, v string) string {
			return fmt.Sprintf("protocol given twice (%q, then %q; each field at most once per rule: write a list like proto tcp,udp to match either)", clipped(prev), clipped(v))
		},
		at:    unsafe.Offsetof(Rule{}.HasProto),
		store: storeProto,
		numAt: unsafe.Offsetof(Nums{}.Proto),
		num:   &protoSpec,
		// A list is never in the record: its proto member holds one.
		numRec: recNum{lo: recProto, hi: recProto, width: 1, op: -1, named: -1},
		text: func(r *Rule) string {
			if n := list(r); n != nil {
				return "proto " + protoSpec.text(r, n)
			}
			if name := protoName(r.Proto); name != "" {
				return name
			}
			return "proto " + strconv.Itoa(int(r.Proto))
		},
		textPos:   1,
		ip:        true,
		checkZero: true, // a Proto without HasProto
		check: func(r *Rule) error {
			if !r.HasProto && r.Proto != 0 {
				return fmt.Errorf("rule sets protocol %d but its protocol match is off", r.Proto)
			}
			if n := list(r); n != nil {
				return protoSpec.check(r, n)
			}
			return nil
		},
		match: func(r *Rule, pkt *packet) bool {
			if n := list(r); n != nil {
				return pkt.isIP && n.Contains(uint32(pkt.proto))
			}
			return pkt.isIP && r.Proto == pkt.proto
		},
		direct: &directField{fld: fldProto, off: int(gen.FastdropFdDirectFD_DIR_PROTO), bits: 8,
			spans: func(r *Rule, dst []span) []span {
				if n := list(r); n != nil {
					return n.spans(dst, 255)
				}
				return append(dst, span{int(r.Proto), int(r.Proto)})
			}},
		recFlag: recFlagProto,
		rec:     []recMember{{"proto", recProto, 1}},
		encode:  func(b []byte, r *Rule) { b[recProto] = r.Proto },
		decode:  func(b []byte, r *Rule) { r.Proto, r.HasProto = b[recProto], true },
	}
}

// protoOnly reports whether r matches only protocols that ok accepts: it
// has a protocol, or a list of them, all of which ok accepts.
func (r *Rule) protoOnly(ok func(p uint8) bool) bool {
	if r.HasProto {
		return ok(r.Proto)
	}
	if r.Nums == nil || !r.Nums.Proto.IsSet() {
		return false
	}
	for _, s := range r.Nums.Proto.spans(nil, 255) {
		for p := s.lo; p <= s.hi; p++ {
			if !ok(uint8(p)) {
				return false
			}
		}
	}
	return true
}

// portSpec is the numSpec of a port field.
func portSpec(name string) numSpec {
	return numSpec{name: name, max: 65535, writeMax: 65535, want: "a port 0-65535", noun: "a port", rng: "1024-65535", cmp: "<1024", list: "53,123"}
}

// needPorts is the check of a port field (sport, dport, port): TCP or
// UDP, and no frag (non-first fragments carry no L4 header).
func needPorts(r *Rule, name, val string) error {
	if !r.protoOnly(func(p uint8) bool { return p == ProtoTCP || p == ProtoUDP }) {
		return fmt.Errorf("%s needs protocol tcp or udp (write e.g. \"udp %s %s\")", name, name, val)
	}
	if r.Fragment {
		return fmt.Errorf("frag never matches together with %s: non-first fragments carry no L4 header", name)
	}
	return nil
}

// portField is the entry of a port field, sport or dport, of TCP or UDP.
func portField(name string, at uintptr, recFlag uint32, recVal, fld, dir int, port func(*packet) uint16, textPos int) matchField {
	spec := portSpec(name)
	return numEntry(numOpts{
		spec:     spec,
		at:       at,
		examples: []string{"drop udp " + name + " 53", "pass tcp " + name + " 1024-65535", "drop udp " + name + " 0", "drop udp " + name + " 53,123,161,1900,11211", "drop udp " + name + " 0-1023,11211", "drop tcp " + name + " !22,443", "drop tcp " + name + " <1024", "drop udp " + name + " >=32768,53"},
		textPos:  textPos,
		ip:       true,
		frames:   framesPorts,
		check:    func(r *Rule, n *Num) error { return needPorts(r, name, spec.text(r, n)) },
		value:    func(p *packet) (uint32, bool) { return uint32(port(p)), p.hasPorts },
		fld:      fld, dir: dir, bits: 16,
		recFlag: recFlag,
		rec:     recNum{lo: recVal, hi: recVal + 2, width: 2, op: -1, named: -1},
	})
}

// fieldByKeyword returns the index in matchFields of the field that the
// keyword s names (as its name or an alias), or -1. Keywords start with a
// lower-case letter; values mostly do not, and are rejected at once (the
// parser asks of every value whether it is a keyword).
func fieldByKeyword(s string) int {
	if s == "" || s[0] < 'a' || s[0] > 'z' {
		return -1
	}
	for i := range matchFields {
		f := &matchFields[i]
		if !f.sub && (f.name == s || f.isAlias(s)) {
			return i
		}
	}
	return -1
}

// isAlias reports whether s is one of f's aliases.
func (f *matchField) isAlias(s string) bool {
	for _, a := range f.aliases {
		if a == s {
			return true
		}
	}
	return false
}

// wantFieldsText lists the keywords, for the parser's "unknown field".
func wantFieldsText() string {
	var names, aliases []string
	for i := range matchFields {
		if matchFields[i].sub {
			continue
		}
		names = append(names, matchFields[i].name)
		aliases = append(aliases, matchFields[i].aliases...)
	}
	return "want " + strings.Join(names, ", ") + ", or " + strings.Join(aliases, ", ")
}

// ipFieldList lists the fields only IP frames match: "src, dst, ... or frag".
func ipFieldList() string {
	var names []string
	for i := range matchFields {
		if matchFields[i].ip && !matchFields[i].sub {
			names = append(names, matchFields[i].name)
		}
	}
	if len(names) == 1 {
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}
