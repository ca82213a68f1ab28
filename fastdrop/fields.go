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
	// ip: only an IPv4 or IPv6 frame can match the field.
	ip bool
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
)

// matchFields are the match fields, in the order messages list them and
// Rule.Validate checks them. init sets it, since entries refer to the
// table (which a variable's initializer may not); nothing changes it.
var matchFields [16]matchField

func init() {
	matchFields = [...]matchField{
		prefixField("src", unsafe.Offsetof(Rule{}.Src), recPlace{recFlagSrc, recSrcLen, recSrc}, func(r *Rule) *netip.Prefix { return &r.Src }, func(p *packet) netip.Addr { return p.src }, 5),
		prefixField("dst", unsafe.Offsetof(Rule{}.Dst), recPlace{recFlagDst, recDstLen, recDst}, func(r *Rule) *netip.Prefix { return &r.Dst }, func(p *packet) netip.Addr { return p.dst }, 7),
		{
			name:     "proto",
			examples: []string{"drop tcp", "pass proto 47", "drop ether ipv6 icmpv6", "drop proto 44 src 2001:db8::/32 frag"},
			aliases:  []string{"tcp", "udp", "icmp", "icmpv6"},
			need:     "proto needs a value (want tcp, udp, icmp, icmpv6 or a protocol number 0-255)",
			parse: func(r *Rule, v string) string {
				n, ok := parseProto(v)
				if !ok {
					return fmt.Sprintf("unknown protocol %q (want tcp, udp, icmp, icmpv6 or a protocol number 0-255)", clipped(v))
				}
				r.Proto, r.HasProto = n, true
				return ""
			},
			twice: func(prev, v string) string {
				return fmt.Sprintf("protocol given twice (%q, then %q; each field at most once per rule, write two rules to match either)", clipped(prev), clipped(v))
			},
			at:    unsafe.Offsetof(Rule{}.HasProto),
			store: storeBool,
			text: func(r *Rule) string {
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
				return nil
			},
			match: func(r *Rule, pkt *packet) bool { return pkt.isIP && r.Proto == pkt.proto },
			direct: &directField{fld: fldProto, off: int(gen.FastdropFdDirectFD_DIR_PROTO), bits: 8,
				spans: func(r *Rule, dst []span) []span { return append(dst, span{int(r.Proto), int(r.Proto)}) }},
			recFlag: recFlagProto,
			rec:     []recMember{{"proto", recProto, 1}},
			encode:  func(b []byte, r *Rule) { b[recProto] = r.Proto },
			decode:  func(b []byte, r *Rule) { r.Proto, r.HasProto = b[recProto], true },
		},
		portField("sport", unsafe.Offsetof(Rule{}.SrcPort), recPlace{flag: recFlagSport, val: recSport}, fldSport, int(gen.FastdropFdDirectFD_DIR_SPORT), func(r *Rule) **PortRange { return &r.SrcPort }, func(p *packet) uint16 { return p.sport }, 6),
		portField("dport", unsafe.Offsetof(Rule{}.DstPort), recPlace{flag: recFlagDport, val: recDport}, fldDport, int(gen.FastdropFdDirectFD_DIR_DPORT), func(r *Rule) **PortRange { return &r.DstPort }, func(p *packet) uint16 { return p.dport }, 8),
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
		{
			name:     "ttl",
			examples: []string{"drop udp ttl 0-2", "drop src 192.0.2.0/24 ttl 64", "pass ether ipv6 ttl 255", "drop frag ttl 1", "drop udp ttl <3", "drop ttl >=250", "drop ttl >1", "drop ttl <=64"},
			need:     "ttl needs a value (want a TTL or hop limit 0-255, a range like 0-2, or a comparison like <3)",
			parse: func(r *Rule, v string) string {
				br, msg := parseByteRange(v, "a TTL or hop limit 0-255, a range like 0-2, or a comparison like <3")
				if msg != "" {
					return fmt.Sprintf("ttl %s: %s", clipped(v), msg)
				}
				r.TTL = br
				return ""
			},
			at:      unsafe.Offsetof(Rule{}.TTL),
			store:   storePtr,
			text:    func(r *Rule) string { return "ttl " + r.TTL.String() },
			textPos: 10,
			ip:      true,
			check: func(r *Rule) error {
				if r.TTL.Lo > r.TTL.Hi {
					return fmt.Errorf("ttl %d-%d: range is empty (write the lower value first)", r.TTL.Lo, r.TTL.Hi)
				}
				if !cmpConsistent(int(r.TTL.Lo), int(r.TTL.Hi), 255, r.TTL.Op) {
					return fmt.Errorf("ttl %d-%d is not what comparison %d leaves", r.TTL.Lo, r.TTL.Hi, r.TTL.Op)
				}
				return nil
			},
			match: func(r *Rule, pkt *packet) bool { return pkt.isIP && r.TTL.Contains(pkt.ttl) },
			direct: &directField{fld: int(gen.FastdropFdFieldFD_FLD_TTL), off: int(gen.FastdropFdDirectFD_DIR_TTL), bits: 8,
				spans: func(r *Rule, dst []span) []span { return append(dst, span{int(r.TTL.Lo), int(r.TTL.Hi)}) }},
			recFlag: uint32(gen.FastdropFdRecFlagsFD_REC_TTL),
			rec:     []recMember{{"ttl_lo", recTTL, 1}, {"ttl_hi", recTTL + 1, 1}, {"ttl_op", recTTLOp, 1}},
			encode: func(b []byte, r *Rule) {
				b[recTTL], b[recTTL+1], b[recTTLOp] = r.TTL.Lo, r.TTL.Hi, uint8(r.TTL.Op)
			},
			decode: func(b []byte, r *Rule) {
				r.TTL = &ByteRange{Lo: b[recTTL], Hi: b[recTTL+1], Op: CmpOp(b[recTTLOp])}
			},
		},
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
				if !r.HasProto || r.Proto != ProtoTCP {
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
		{
			name:     "queue",
			examples: []string{"redirect udp dport 53 queue 0-3", "drop queue 7", "pass ether arp queue 1"},
			need:     fmt.Sprintf("queue needs a value (want an rx queue 0-%d or a range like 0-3)", MaxQueue),
			parse: func(r *Rule, v string) string {
				q, msg := parseQueueRange(v)
				if msg != "" {
					return fmt.Sprintf("queue %s: %s", clipped(v), msg)
				}
				r.Queue = q
				return ""
			},
			at:      unsafe.Offsetof(Rule{}.Queue),
			store:   storePtr,
			text:    func(r *Rule) string { return "queue " + r.Queue.String() },
			textPos: 12,
			check: func(r *Rule) error {
				switch q := r.Queue; {
				case q.Lo > q.Hi:
					return fmt.Errorf("queue %d-%d: range is empty (write the lower queue first)", q.Lo, q.Hi)
				case int(q.Hi) > MaxQueue:
					return fmt.Errorf("queue %s: rx queues go up to %d", q, MaxQueue)
				}
				return nil
			},
			match: func(r *Rule, pkt *packet) bool { return r.Queue.Contains(uint16(min(pkt.queue, uint32(MaxQueue+1)))) },
			direct: &directField{fld: fldQueue, off: int(gen.FastdropFdDirectFD_DIR_QUEUE), bits: 9,
				spans: func(r *Rule, dst []span) []span { return append(dst, span{int(r.Queue.Lo), int(r.Queue.Hi)}) }},
			recFlag: recFlagQueue,
			rec:     []recMember{{"queue_lo", recQueue, 2}, {"queue_hi", recQueue + 2, 2}},
			encode: func(b []byte, r *Rule) {
				binary.LittleEndian.PutUint16(b[recQueue:], r.Queue.Lo)
				binary.LittleEndian.PutUint16(b[recQueue+2:], r.Queue.Hi)
			},
			decode: func(b []byte, r *Rule) {
				r.Queue = &PortRange{Lo: binary.LittleEndian.Uint16(b[recQueue:]), Hi: binary.LittleEndian.Uint16(b[recQueue+2:])}
			},
		},
		{
			name:     "dscp",
			examples: []string{"drop dscp 46", "drop dscp ef", "pass udp dscp af41", "drop src 2001:db8::/32 dscp cs1", "drop dscp 8-15", "drop dscp >=32", "drop dscp <8"},
			need:     "dscp needs a value (" + wantDSCP + ")",
			parse: func(r *Rule, v string) string {
				d, msg := parseDSCP(v)
				if msg != "" {
					return fmt.Sprintf("dscp %s: %s", clipped(v), msg)
				}
				r.DSCP = d
				return ""
			},
			at:      unsafe.Offsetof(Rule{}.DSCP),
			store:   storePtr,
			text:    func(r *Rule) string { return "dscp " + r.DSCP.String() },
			textPos: 11,
			ip:      true,
			check: func(r *Rule) error {
				if d := r.DSCP; d.Lo > d.Hi || d.Hi > 63 || d.Named && d.Lo != d.Hi || !cmpConsistent(int(d.Lo), int(d.Hi), 63, d.Op) {
					return fmt.Errorf("dscp %d-%d: want a range within 0-63, lower value first", d.Lo, d.Hi)
				}
				return nil
			},
			match: func(r *Rule, pkt *packet) bool { return pkt.isIP && r.DSCP.Lo <= pkt.dscp && pkt.dscp <= r.DSCP.Hi },
			direct: &directField{fld: int(gen.FastdropFdFieldFD_FLD_DSCP), off: int(gen.FastdropFdDirectFD_DIR_DSCP), bits: 6,
				spans: func(r *Rule, dst []span) []span { return append(dst, span{int(r.DSCP.Lo), int(r.DSCP.Hi)}) }},
			recFlag: uint32(gen.FastdropFdRecFlagsFD_REC_DSCP),
			rec:     []recMember{{"dscp_lo", recDSCP, 1}, {"dscp_hi", recDSCP + 1, 1}, {"dscp_named", recDSCP + 2, 1}, {"dscp_op", recDSCPOp, 1}},
			encode: func(b []byte, r *Rule) {
				b[recDSCP], b[recDSCP+1], b[recDSCP+2], b[recDSCPOp] = r.DSCP.Lo, r.DSCP.Hi, 0, uint8(r.DSCP.Op)
				if r.DSCP.Named {
					b[recDSCP+2] = 1
				}
			},
			decode: func(b []byte, r *Rule) {
				r.DSCP = &DSCPRange{Lo: b[recDSCP], Hi: b[recDSCP+1], Named: b[recDSCP+2] != 0, Op: CmpOp(b[recDSCPOp])}
			},
		},
		icmpField("type", unsafe.Offsetof(Rule{}.ICMPType), 3),
		icmpField("code", unsafe.Offsetof(Rule{}.ICMPCode), 4),
		lenField(),
		fragBitsField(),
		portEitherField(),
	}
}

// ICMPType is what type matches: the ICMP or ICMPv6 type in Lo-Hi. Named:
// written by its name, which depends on the protocol (echo-request is 8 in
// ICMP, 128 in ICMPv6) and String writes back.
type ICMPType struct {
	Lo, Hi uint8
	Named  bool
	Op     CmpOp // how it was written, as ByteRange.Op
}

// icmpOp returns the comparison type's or code's range was written with.
func icmpOp(r *Rule, isType bool) CmpOp {
	if isType {
		return r.ICMPType.Op
	}
	return r.ICMPCode.Op
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

// icmpField is the entry of type or code: a value or range of the ICMP or
// ICMPv6 header's first (type) or second (code) byte.
func icmpField(name string, at uintptr, textPos int) matchField {
	isType := name == "type"
	want := "a number 0-255 or a range like 3-5"
	if isType {
		want += ", or after icmp or icmpv6 a name such as echo-request"
	}
	lohi := func(r *Rule) (uint8, uint8) {
		if isType {
			return r.ICMPType.Lo, r.ICMPType.Hi
		}
		return r.ICMPCode.Lo, r.ICMPCode.Hi
	}
	fld, dir, flag, rec := int(gen.FastdropFdFieldFD_FLD_CODE), int(gen.FastdropFdDirectFD_DIR_CODE), uint32(gen.FastdropFdRecFlagsFD_REC_CODE), recCode
	recOp := recCodeOp
	members := []recMember{{"code_lo", recCode, 1}, {"code_hi", recCode + 1, 1}, {"code_op", recCodeOp, 1}}
	if isType {
		fld, dir, flag, rec = int(gen.FastdropFdFieldFD_FLD_TYPE), int(gen.FastdropFdDirectFD_DIR_TYPE), uint32(gen.FastdropFdRecFlagsFD_REC_TYPE), recType
		recOp = recTypeOp
		members = []recMember{{"type_lo", recType, 1}, {"type_hi", recType + 1, 1}, {"type_named", recTypeNamed, 1}, {"type_op", recTypeOp, 1}}
	}
	examples := []string{"drop icmp " + name + " 3", "drop icmpv6 " + name + " 128-129", "pass icmp " + name + " 0 src 192.0.2.0/24", "drop icmp " + name + " >=128", "drop icmpv6 " + name + " <4"}
	if isType {
		examples = append(examples, "drop icmp type echo-request", "drop icmpv6 type nd-neighbor-solicit", "drop icmp type 3 code 4")
	}
	return matchField{
		name:     name,
		examples: examples,
		need:     name + " needs a value (want " + want + ")",
		parse: func(r *Rule, v string) string {
			if isType && v != "" && v[0] >= 'a' && v[0] <= 'z' {
				if !r.HasProto || icmpTypeNames[r.Proto] == nil {
					return fmt.Sprintf("type %s: write icmp or icmpv6 before a type name (its number depends on the protocol), or the type's number", clipped(v))
				}
				n, ok := icmpTypeNames[r.Proto][v]
				if !ok {
					names := make([]string, 0, len(icmpTypeNames[r.Proto]))
					for k := range icmpTypeNames[r.Proto] {
						names = append(names, k)
					}
					slices.Sort(names)
					return fmt.Sprintf("type %s: unknown %s type (want a number 0-255 or one of %s)", clipped(v), protoName(r.Proto), strings.Join(names, ", "))
				}
				r.ICMPType = &ICMPType{Lo: n, Hi: n, Named: true}
				return ""
			}
			br, msg := parseByteRange(v, want)
			if msg != "" {
				return fmt.Sprintf("%s %s: %s", name, clipped(v), msg)
			}
			if isType {
				r.ICMPType = &ICMPType{Lo: br.Lo, Hi: br.Hi, Op: br.Op}
			} else {
				r.ICMPCode = br
			}
			return ""
		},
		at:    at,
		store: storePtr,
		text: func(r *Rule) string {
			if isType && r.ICMPType.Named {
				return "type " + icmpTypeName(r.Proto, r.ICMPType.Lo)
			}
			lo, hi := lohi(r)
			op := r.ICMPCode
			if isType {
				return name + " " + ByteRange{Lo: lo, Hi: hi, Op: r.ICMPType.Op}.String()
			}
			return name + " " + op.String()
		},
		textPos: textPos,
		ip:      true,
		frames:  framesFirst,
		check: func(r *Rule) error {
			lo, hi := lohi(r)
			if lo > hi {
				return fmt.Errorf("%s %d-%d: range is empty (write the lower value first)", name, lo, hi)
			}
			if op := icmpOp(r, isType); !cmpConsistent(int(lo), int(hi), 255, op) {
				return fmt.Errorf("%s %d-%d is not what comparison %d leaves", name, lo, hi, op)
			}
			if !r.HasProto || icmpTypeNames[r.Proto] == nil {
				return fmt.Errorf("%s needs protocol icmp or icmpv6 (write e.g. \"icmp %s %s\")", name, name, ByteRange{Lo: lo, Hi: hi})
			}
			if isType && r.ICMPType.Named && (lo != hi || icmpTypeName(r.Proto, lo) == "") {
				return fmt.Errorf("type %d of %s has no name", lo, protoName(r.Proto))
			}
			if r.Fragment {
				return fmt.Errorf("frag never matches together with %s: non-first fragments carry no ICMP header", name)
			}
			return nil
		},
		match: func(r *Rule, pkt *packet) bool {
			lo, hi := lohi(r)
			v := pkt.icmpCode
			if isType {
				v = pkt.icmpType
			}
			return pkt.hasICMP && lo <= v && v <= hi
		},
		direct: &directField{fld: fld, off: dir, bits: 8,
			spans: func(r *Rule, dst []span) []span { lo, hi := lohi(r); return append(dst, span{int(lo), int(hi)}) }},
		recFlag: flag,
		rec:     members,
		encode: func(b []byte, r *Rule) {
			b[rec], b[rec+1] = lohi(r)
			b[recOp] = uint8(icmpOp(r, isType))
			if isType && r.ICMPType.Named {
				b[recTypeNamed] = 1
			}
		},
		decode: func(b []byte, r *Rule) {
			if isType {
				r.ICMPType = &ICMPType{Lo: b[rec], Hi: b[rec+1], Named: b[recTypeNamed] != 0, Op: CmpOp(b[recOp])}
			} else {
				r.ICMPCode = &ByteRange{Lo: b[rec], Hi: b[rec+1], Op: CmpOp(b[recOp])}
			}
		},
	}
}

// DSCPRange is what dscp matches: the Differentiated Services codepoint
// (RFC 2474: the IPv4 TOS byte's or IPv6 traffic class's top 6 bits) in
// Lo-Hi. Named: written by its name (ef, af11 ... af43, cs0 ... cs7), which
// String writes back.
type DSCPRange struct {
	Lo, Hi uint8
	Named  bool
	Op     CmpOp // how it was written, as ByteRange.Op
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

func (d DSCPRange) String() string {
	if d.Named {
		return dscpName(d.Lo)
	}
	return rangeText(int(d.Lo), int(d.Hi), d.Op)
}

func parseDSCP(s string) (*DSCPRange, string) {
	if s != "" && s[0] >= 'a' && s[0] <= 'z' {
		for v := range uint8(64) {
			if n := dscpName(v); n == s {
				return &DSCPRange{Lo: v, Hi: v, Named: true}, ""
			}
		}
		return nil, "unknown codepoint name (" + wantDSCP + ")"
	}
	if lo, hi, op, msg, ok := parseCmp(s, 63, "a codepoint 0-63, a range like 8-15, a comparison like >=32, or a name: ef, af11 to af43, cs0 to cs7"); ok {
		if msg != "" {
			return nil, msg
		}
		return &DSCPRange{Lo: uint8(lo), Hi: uint8(hi), Op: op}, ""
	}
	br, msg := parseByteRange(s, "a codepoint 0-63, a range like 8-15, or a name: ef, af11 to af43, cs0 to cs7")
	if msg != "" {
		return nil, msg
	}
	if br.Hi > 63 {
		return nil, fmt.Sprintf("%d is not a codepoint: DSCP has 6 bits, 0-63 (the TOS byte %d is DSCP %d)", br.Hi, br.Hi, br.Hi>>2)
	}
	return &DSCPRange{Lo: br.Lo, Hi: br.Hi}, ""
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

// ByteRange is an inclusive range of the values of an 8-bit field (ttl); a
// single value has Lo == Hi.
// Op says how it was written, for String: CmpNone or CmpRange for N or
// LO-HI; a comparison (<3 is 0-2 with CmpLT, >=64 is 64-255 with CmpGE).
type ByteRange struct {
	Lo, Hi uint8
	Op     CmpOp
}

// Contains reports whether Lo <= v <= Hi.
func (b ByteRange) Contains(v uint8) bool { return b.Lo <= v && v <= b.Hi }

func (b ByteRange) String() string { return rangeText(int(b.Lo), int(b.Hi), b.Op) }

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

// cmpConsistent reports whether lo-hi is what op leaves of 0-max (a
// comparison's range reaches 0 or max; a range may be anything).
func cmpConsistent(lo, hi, max int, op CmpOp) bool {
	switch op {
	case CmpNone, CmpRange:
		return true
	case CmpGT:
		return lo > 0 && hi == max
	case CmpGE:
		return hi == max
	case CmpLT, CmpLE:
		return lo == 0 && (op == CmpLE || hi < max)
	}
	return false
}

// parseCmp parses a comparison with a value of 0-max (>N, >=N, <N, <=N) into
// the range it leaves; ok is false if s is not a comparison.
func parseCmp(s string, max int, want string) (lo, hi int, op CmpOp, msg string, ok bool) {
	for _, op := range []CmpOp{CmpGE, CmpLE, CmpGT, CmpLT} {
		rest, found := strings.CutPrefix(s, cmpText[op])
		if !found {
			continue
		}
		n, isNum := parseUint(rest, 6)
		if !isNum || n > max {
			return 0, 0, 0, fmt.Sprintf("%q is not a number 0-%d (want %s)", clipped(rest), max, want), true
		}
		switch op {
		case CmpGT:
			if n == max {
				return 0, 0, 0, fmt.Sprintf(">%d never matches: no value is above %d", n, max), true
			}
			return n + 1, max, op, "", true
		case CmpGE:
			return n, max, op, "", true
		case CmpLT:
			if n == 0 {
				return 0, 0, 0, "<0 never matches: no value is below 0", true
			}
			return 0, n - 1, op, "", true
		}
		return 0, n, op, "", true
	}
	return 0, 0, 0, "", false
}

// parseByteRange parses "N", "LO-HI" (0-255) or a comparison (>N, >=N,
// <N, <=N); want says what is wanted.
func parseByteRange(s, want string) (*ByteRange, string) {
	if lo, hi, op, msg, ok := parseCmp(s, 255, want); ok {
		if msg != "" {
			return nil, msg
		}
		return &ByteRange{Lo: uint8(lo), Hi: uint8(hi), Op: op}, ""
	}
	los, his, isRange := strings.Cut(s, "-")
	lo, ok := parseUint(los, 3)
	if !ok || lo > 255 {
		return nil, fmt.Sprintf("%q is not a number 0-255 (want %s)", clipped(los), want)
	}
	hi := lo
	if isRange {
		if hi, ok = parseUint(his, 3); !ok || hi > 255 {
			return nil, fmt.Sprintf("%q is not a number 0-255 (want %s)", clipped(his), want)
		}
		if lo > hi {
			return nil, fmt.Sprintf("range is empty (write the lower value first: %d-%d)", hi, lo)
		}
	}
	return &ByteRange{Lo: uint8(lo), Hi: uint8(hi)}, ""
}

// parseQueueRange reads an rx queue or an inclusive range of them.
func parseQueueRange(s string) (*PortRange, string) {
	want := fmt.Sprintf("want an rx queue 0-%d or a range like 0-3", MaxQueue)
	los, his, isRange := strings.Cut(s, "-")
	lo, ok := parseUint(los, 3)
	if !ok || lo > MaxQueue {
		return nil, fmt.Sprintf("%q is not an rx queue (%s)", clipped(los), want)
	}
	hi := lo
	if isRange {
		if hi, ok = parseUint(his, 3); !ok || hi > MaxQueue {
			return nil, fmt.Sprintf("%q is not an rx queue (%s)", clipped(his), want)
		}
		if lo > hi {
			return nil, fmt.Sprintf("range is empty (write the lower queue first: %d-%d)", hi, lo)
		}
	}
	return &PortRange{Lo: uint16(lo), Hi: uint16(hi)}, ""
}

// prefixField is the entry of an address field, src or dst: a prefix,
// IPv4 or IPv6, matched against the frame's address that addr returns.
func prefixField(name string, at uintptr, rf recPlace, get func(*Rule) *netip.Prefix, addr func(*packet) netip.Addr, textPos int) matchField {
	return matchField{
		name:     name,
		examples: []string{"drop " + name + " 192.0.2.0/24", "pass tcp " + name + " 2001:db8::1/128", "drop " + name + " 0.0.0.0/0 frag"},
		need:     fmt.Sprintf("%s needs a value (want an address or prefix, e.g. %s 192.0.2.0/24, %s 2001:db8::/32 or %s 192.0.2.1)", name, name, name, name),
		parse: func(r *Rule, v string) string {
			pfx, msg := parsePrefix(v)
			if msg != "" {
				return fmt.Sprintf("%s %s: %s", name, clipped(v), msg)
			}
			*get(r) = pfx
			return ""
		},
		at:        at,
		store:     storePrefix,
		text:      func(r *Rule) string { return name + " " + get(r).String() },
		textPos:   textPos,
		ip:        true,
		checkZero: true, // an invalid prefix is not set, and is refused
		check: func(r *Rule) error {
			p := *get(r)
			if err := validatePrefix(name, p); err != nil {
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
		match:   func(r *Rule, pkt *packet) bool { return pkt.isIP && get(r).Contains(addr(pkt)) },
		recFlag: rf.flag,
		rec:     []recMember{{name + "_len", rf.len, 1}, {"family", recFamily, 1}, {name, rf.val, 16}},
		encode: func(b []byte, r *Rule) {
			p := *get(r)
			b[rf.len] = uint8(p.Bits())
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
		},
	}
}

// recPlace is where a field is in struct fd_rule_rec: its flag, and the
// offsets of its prefix length (address fields) and of its value.
type recPlace struct {
	flag     uint32
	len, val int
}

// portField is the entry of a port field, sport or dport: a port or an
// inclusive range, of TCP or UDP.
func portField(name string, at uintptr, rf recPlace, fld, dir int, get func(*Rule) **PortRange, port func(*packet) uint16, textPos int) matchField {
	return matchField{
		name:     name,
		examples: []string{"drop udp " + name + " 53", "pass tcp " + name + " 1024-65535", "drop udp " + name + " 0"},
		need:     name + " needs a value (want a port 0-65535 or a range like 1024-65535)",
		parse: func(r *Rule, v string) string {
			pr, msg := parsePortRange(v)
			if msg != "" {
				return fmt.Sprintf("%s %s: %s", name, clipped(v), msg)
			}
			*get(r) = pr
			return ""
		},
		at:      at,
		store:   storePtr,
		text:    func(r *Rule) string { return name + " " + (*get(r)).String() },
		textPos: textPos,
		ip:      true,
		check: func(r *Rule) error {
			p := *get(r)
			if p == nil {
				return nil
			}
			if p.Lo > p.Hi {
				return fmt.Errorf("%s %d-%d: range is empty (write the lower port first)", name, p.Lo, p.Hi)
			}
			if !r.HasProto || (r.Proto != ProtoTCP && r.Proto != ProtoUDP) {
				return fmt.Errorf("%s needs protocol tcp or udp (write e.g. \"udp %s %s\")", name, name, p)
			}
			if r.Fragment {
				return fmt.Errorf("frag never matches together with %s: non-first fragments carry no L4 header", name)
			}
			return nil
		},
		frames: framesPorts,
		match:  func(r *Rule, pkt *packet) bool { return pkt.hasPorts && (*get(r)).Contains(port(pkt)) },
		direct: &directField{fld: fld, off: dir, bits: 16,
			spans: func(r *Rule, dst []span) []span { p := *get(r); return append(dst, span{int(p.Lo), int(p.Hi)}) }},
		recFlag: rf.flag,
		rec:     []recMember{{name + "_lo", rf.val, 2}, {name + "_hi", rf.val + 2, 2}},
		encode: func(b []byte, r *Rule) {
			p := *get(r)
			binary.LittleEndian.PutUint16(b[rf.val:], p.Lo)
			binary.LittleEndian.PutUint16(b[rf.val+2:], p.Hi)
		},
		decode: func(b []byte, r *Rule) {
			*get(r) = &PortRange{Lo: binary.LittleEndian.Uint16(b[rf.val:]), Hi: binary.LittleEndian.Uint16(b[rf.val+2:])}
		},
	}
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
