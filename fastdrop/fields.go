package fastdrop

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"unsafe"
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
	recFlag uint8
	// rec names the members of struct fd_rule_rec that hold the value,
	// at their offsets and widths (TestRecordLayout checks them against
	// the BTF of the object).
	rec []recMember
	// encode writes the field of r into the record b; decode reads it
	// back into r.
	encode func(b []byte, r *Rule)
	decode func(b []byte, r *Rule)
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
	storeRange                       // *PortRange; set if not nil
	storeU16                         // uint16; set if not 0
	storeBool                        // bool; set if true (proto: HasProto)
)

// matchFields are the match fields, in the order messages list them and
// Rule.Validate checks them. init sets it, since entries refer to the
// table (which a variable's initializer may not); nothing changes it.
var matchFields [8]matchField

func init() {
	matchFields = [...]matchField{
		prefixField("src", unsafe.Offsetof(Rule{}.Src), recPlace{recFlagSrc, recSrcLen, recSrc}, func(r *Rule) *netip.Prefix { return &r.Src }, func(p *packet) netip.Addr { return p.src }, 2),
		prefixField("dst", unsafe.Offsetof(Rule{}.Dst), recPlace{recFlagDst, recDstLen, recDst}, func(r *Rule) *netip.Prefix { return &r.Dst }, func(p *packet) netip.Addr { return p.dst }, 4),
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
			match:   func(r *Rule, pkt *packet) bool { return pkt.isIP && r.Proto == pkt.proto },
			recFlag: recFlagProto,
			rec:     []recMember{{"proto", recProto, 1}},
			encode:  func(b []byte, r *Rule) { b[recProto] = r.Proto },
			decode:  func(b []byte, r *Rule) { r.Proto, r.HasProto = b[recProto], true },
		},
		portField("sport", unsafe.Offsetof(Rule{}.SrcPort), recPlace{flag: recFlagSport, val: recSport}, func(r *Rule) **PortRange { return &r.SrcPort }, func(p *packet) uint16 { return p.sport }, 3),
		portField("dport", unsafe.Offsetof(Rule{}.DstPort), recPlace{flag: recFlagDport, val: recDport}, func(r *Rule) **PortRange { return &r.DstPort }, func(p *packet) uint16 { return p.dport }, 5),
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
			match:  func(r *Rule, pkt *packet) bool { return r.EtherType == pkt.etherType },
			rec:    []recMember{{"ether", recEther, 2}},
			encode: func(b []byte, r *Rule) { binary.LittleEndian.PutUint16(b[recEther:], r.EtherType) },
			decode: func(b []byte, r *Rule) { r.EtherType = binary.LittleEndian.Uint16(b[recEther:]) },
		},
		{
			name:     "frag",
			examples: []string{"drop frag", "drop udp src 192.0.2.0/24 frag"},
			flag:     true,
			parse:    func(r *Rule, _ string) string { r.Fragment = true; return "" },
			at:       unsafe.Offsetof(Rule{}.Fragment),
			store:    storeBool,
			text:     func(*Rule) string { return "frag" },
			textPos:  6,
			ip:       true,
			match:    func(_ *Rule, pkt *packet) bool { return pkt.isIP && pkt.fragment },
			recFlag:  recFlagFrag,
			encode:   func([]byte, *Rule) {},
			decode:   func(_ []byte, r *Rule) { r.Fragment = true },
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
			store:   storeRange,
			text:    func(r *Rule) string { return "queue " + r.Queue.String() },
			textPos: 7,
			check: func(r *Rule) error {
				switch q := r.Queue; {
				case q.Lo > q.Hi:
					return fmt.Errorf("queue %d-%d: range is empty (write the lower queue first)", q.Lo, q.Hi)
				case int(q.Hi) > MaxQueue:
					return fmt.Errorf("queue %s: rx queues go up to %d", q, MaxQueue)
				}
				return nil
			},
			match:   func(r *Rule, pkt *packet) bool { return r.Queue.Contains(uint16(min(pkt.queue, uint32(MaxQueue+1)))) },
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
	}
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
	flag     uint8
	len, val int
}

// portField is the entry of a port field, sport or dport: a port or an
// inclusive range, of TCP or UDP.
func portField(name string, at uintptr, rf recPlace, get func(*Rule) **PortRange, port func(*packet) uint16, textPos int) matchField {
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
		store:   storeRange,
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
		match:   func(r *Rule, pkt *packet) bool { return pkt.hasPorts && (*get(r)).Contains(port(pkt)) },
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
		if f.name == s || f.isAlias(s) {
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
		names = append(names, matchFields[i].name)
		aliases = append(aliases, matchFields[i].aliases...)
	}
	return "want " + strings.Join(names, ", ") + ", or " + strings.Join(aliases, ", ")
}

// ipFieldList lists the fields only IP frames match: "src, dst, ... or frag".
func ipFieldList() string {
	var names []string
	for i := range matchFields {
		if matchFields[i].ip {
			names = append(names, matchFields[i].name)
		}
	}
	if len(names) == 1 {
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}
