package fastdrop

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Action is the verdict a rule (or a policy) gives a frame.
type Action uint8

const (
	ActionDrop Action = iota + 1
	ActionPass
	// ActionRedirect hands the frame to the AF_XDP socket bound to its rx
	// queue (Engine.RegisterSocket), or to the kernel stack when there is
	// none.
	ActionRedirect
	// ActionLimit polices the frames a compound rule matches (Rule.Limit):
	// those within the rate pass, the excess is dropped. Rules only: never
	// a policy.
	ActionLimit
)

// String returns the rule-file keyword of a: "drop", "pass" or "redirect".
func (a Action) String() string {
	switch a {
	case ActionDrop:
		return "drop"
	case ActionPass:
		return "pass"
	case ActionRedirect:
		return "redirect"
	case ActionLimit:
		return "limit"
	}
	return "Action(" + strconv.Itoa(int(a)) + ")"
}

// ParseAction parses a rule-file action keyword.
func ParseAction(s string) (Action, error) {
	switch s {
	case "drop":
		return ActionDrop, nil
	case "pass":
		return ActionPass, nil
	case "redirect":
		return ActionRedirect, nil
	case "limit":
		return ActionLimit, nil
	}
	return 0, fmt.Errorf("unknown action %q (want drop, pass, redirect or limit)", s)
}

func (a Action) valid() bool { return a >= ActionDrop && a <= ActionLimit }

// MaxCompoundRules is the largest number of compound (not prefix-only) rules
// a rule set may hold; the kernel program scans them per packet.
const MaxCompoundRules = 256

// Sentinel errors for rule sets that are well-formed line by line but not as
// a whole. Errors returned by Parse and RuleSet.Validate wrap them.
var (
	ErrDuplicatePrefix = errors.New("duplicate prefix rule")
	ErrTooManyRules    = errors.New("too many compound rules")
)

// L4 protocol numbers the rule syntax has names for.
const (
	ProtoICMP   = 1
	ProtoTCP    = 6
	ProtoUDP    = 17
	ProtoICMPv6 = 58
)

// EtherTypes the rule syntax has names for.
const (
	EtherTypeIPv4 = 0x0800
	EtherTypeARP  = 0x0806
	EtherTypeVLAN = 0x8100 // 802.1Q tag; skipped by the frame parser, never matched
	EtherTypeQinQ = 0x88a8 // 802.1ad tag; skipped by the frame parser, never matched
	EtherTypeIPv6 = 0x86dd
	EtherTypeLLDP = 0x88cc
)

// PortRange is an inclusive range of L4 ports; a single port has Lo == Hi.
type PortRange struct{ Lo, Hi uint16 }

// Contains reports whether Lo <= port <= Hi.
func (p PortRange) Contains(port uint16) bool { return p.Lo <= port && port <= p.Hi }

func (p PortRange) String() string {
	if p.Lo == p.Hi {
		return strconv.Itoa(int(p.Lo))
	}
	return strconv.Itoa(int(p.Lo)) + "-" + strconv.Itoa(int(p.Hi))
}

// Rule is one line of a rule file. A zero field matches anything.
type Rule struct {
	Action   Action
	Src, Dst netip.Prefix // zero Prefix = any. Must be masked, IPv4 or IPv6 (no IPv4-mapped IPv6, no zone).
	Proto    uint8        // L4 protocol number (IPv4 protocol / IPv6 final next header); only with HasProto
	HasProto bool
	// Nums holds the numeric fields (sport, dport, port, len, ttl, dscp,
	// ICMP type and code, queue): nil if the rule has none. The port
	// fields need HasProto with Proto 6 (tcp) or 17 (udp), type and code
	// Proto 1 (icmp) or 58 (icmpv6).
	Nums *Nums
	// EtherType matched against the EtherType after up to two VLAN tags;
	// 0 = any. E.g. 0x0806 ARP, 0x88cc LLDP, 0x0800 IPv4, 0x86dd IPv6.
	EtherType uint16
	Fragment  bool // matches only non-first IP fragments (fragment offset != 0)
	// FragBits: frag with bits (frag first, frag !df); zero = any. Not
	// with Fragment (frag alone).
	FragBits FragBits
	TCPFlags *TCPFlags // nil = any; needs HasProto with Proto 6 (tcp)
	// Sample is the sample modifier ("sample 1/1000"): the program sends
	// 1 in Sample of the rule's frames to its rule samples' ring (package
	// capture, `xdpdrop capture --rule-samples`); 0: none. It changes no
	// verdict.
	Sample uint32
	Line   int // 1-based line in the rule file, 0 if built in code
	// Origin names where the rule came from (see origin.go): "" for the
	// default origin (the drop command's), OriginRedirect, or a name of
	// another source. It is kept with the rule in the engine's records
	// and orders the rules of different origins; it is no part of the
	// rule's text.
	Origin string
	// Limit is the policer of an ActionLimit rule (nil for every other
	// action).
	Limit *Limit
}

// IsPrefixOnly reports whether r is "ACTION src PREFIX" or "ACTION dst
// PREFIX" and nothing else. Such rules go to the longest-prefix-match
// tables (the source one, or the destination one: see PrefixKey) instead
// of the ordered compound rule list. Line does not matter. (A Proto
// without HasProto or an invalid src or dst, which Validate refuses, make
// a rule compound too.)
func (r Rule) IsPrefixOnly() bool {
	if r.Proto != 0 || r.Action == ActionLimit || r.Limit != nil {
		return false
	}
	name := "src"
	switch {
	case r.Src.IsValid():
		// The common case, fast (it is asked for each of a million
		// rules): no field but src has a value, so none is set.
		if z := (Rule{Action: r.Action, Src: r.Src, Sample: r.Sample, Line: r.Line, Origin: r.Origin}); r == z {
			return true
		}
	case r.Dst.IsValid():
		if z := (Rule{Action: r.Action, Dst: r.Dst, Sample: r.Sample, Line: r.Line, Origin: r.Origin}); r == z {
			return true
		}
		name = "dst"
	default:
		return false
	}
	for i := range matchFields {
		f := &matchFields[i]
		if f.name != name && (f.isSet(&r) || f.store == storePrefix && *f.prefixOf(&r) != netip.Prefix{}) {
			return false
		}
	}
	return true
}

// PrefixKey is where a prefix rule (IsPrefixOnly) sits: its prefix, and
// whether that is the destination's (the destination prefix table) or
// the source's. One table holds a prefix at most once.
type PrefixKey struct {
	Prefix netip.Prefix
	Dst    bool
}

// PrefixKey returns r's key in the prefix tables; r must be a prefix rule.
func (r *Rule) PrefixKey() PrefixKey {
	if r.Src.IsValid() {
		return PrefixKey{Prefix: r.Src}
	}
	return PrefixKey{Prefix: r.Dst, Dst: true}
}

// String is the prefix, with "dst " before a destination prefix.
func (k PrefixKey) String() string {
	if k.Dst {
		return "dst " + k.Prefix.String()
	}
	return k.Prefix.String()
}

// String returns r in canonical rule-file syntax, for example
// "drop udp src 192.0.2.0/24 dport 11211". Parsing it gives back r (apart
// from Line and Origin). Fields are written in the order of their
// textPos: ether, proto, flags, src, sport, dst, dport, frag, ttl, queue.
func (r Rule) String() string {
	var b strings.Builder
	b.WriteString(r.Action.String())
	if r.Limit != nil {
		b.WriteByte(' ')
		b.WriteString(r.Limit.text(r.family()))
	}
	for pos := range matchFields {
		for i := range matchFields {
			if f := &matchFields[i]; f.textPos == pos && f.isSet(&r) {
				b.WriteByte(' ')
				b.WriteString(f.text(&r))
			}
		}
	}
	if r.Sample != 0 {
		b.WriteString(" sample 1/")
		b.WriteString(strconv.FormatUint(uint64(r.Sample), 10))
	}
	return b.String()
}

func protoName(p uint8) string {
	switch p {
	case ProtoTCP:
		return "tcp"
	case ProtoUDP:
		return "udp"
	case ProtoICMP:
		return "icmp"
	case ProtoICMPv6:
		return "icmpv6"
	}
	return ""
}

func etherName(t uint16) string {
	switch t {
	case EtherTypeARP:
		return "arp"
	case EtherTypeLLDP:
		return "lldp"
	case EtherTypeIPv4:
		return "ipv4"
	case EtherTypeIPv6:
		return "ipv6"
	}
	return fmt.Sprintf("0x%04x", t)
}

// family returns 4 or 6 if r can only match IPv4 or IPv6 frames (because of
// a prefix or an ether match), 0 otherwise. It assumes the prefixes agree.
func (r Rule) family() int {
	for i := range matchFields {
		if f := &matchFields[i]; f.store == storePrefix {
			if p := f.prefixOf(&r); p.IsValid() {
				if p.Addr().Is4() {
					return 4
				}
				return 6
			}
		}
	}
	switch r.EtherType {
	case EtherTypeIPv4:
		return 4
	case EtherTypeIPv6:
		return 6
	}
	return 0
}

// needsIP reports whether r has a field that only an IP frame can match.
func (r Rule) needsIP() bool {
	for i := range matchFields {
		if f := &matchFields[i]; f.ip && f.isSet(&r) {
			return true
		}
	}
	return false
}

// Validate reports whether r is a rule the kernel program and the model can
// evaluate, and rejects rules that could never match. The error says what is
// wrong and how to write it instead; it has no file or line (Parse adds them).
// Each field's check (matchFields) runs in table order, then the checks of
// combinations that no one field owns.
func (r Rule) Validate() error { return r.validate() }

// validate is Validate of *r. The field checks are function values, to
// which r escapes: callers that check many rules call this on the rule
// where it is, so that no copy of it is made on the heap.
func (r *Rule) validate() error {
	if !r.Action.valid() {
		return fmt.Errorf("invalid action %d (want drop, pass, redirect or limit)", r.Action)
	}
	switch {
	case r.Action == ActionLimit && r.Limit == nil:
		return errors.New("limit needs a rate (want e.g. limit 1000/s udp dport 53)")
	case r.Action != ActionLimit && r.Limit != nil:
		return fmt.Errorf("a rate is only for limit rules, not %s", r.Action)
	case r.Limit != nil:
		if err := r.Limit.validate(); err != nil {
			return err
		}
		if r.Limit.PerSrc && r.Limit.Src4Len != 0 && r.family() == 6 {
			return errors.New("per src/N/M on an IPv6 rule: write per src/M")
		}
	}
	if err := ValidateOrigin(r.Origin); err != nil {
		return err
	}
	for i := range matchFields {
		if f := &matchFields[i]; f.check != nil && (f.checkZero || f.isSet(r)) {
			if err := f.check(r); err != nil {
				return err
			}
		}
	}
	if n := listsBytes(r); n > listsSize {
		return fmt.Errorf("the rule's value lists are too long together (%d bytes of the %d a rule keeps; at most %d items in one list): split it into two rules", n, listsSize, MaxListItems)
	}
	fam := r.family()
	if r.HasProto {
		switch {
		case fam == 6 && r.Proto == ProtoICMP:
			return errors.New("icmp (protocol 1) is IPv4's ICMP and never matches IPv6 frames; use icmpv6")
		case fam == 4 && r.Proto == ProtoICMPv6:
			return errors.New("icmpv6 (protocol 58) never matches IPv4 frames; use icmp")
		case fam == 6 && isIPv6ExtHeader(r.Proto) && !r.Fragment:
			// Extension headers are skipped, so only a non-first fragment,
			// whose protocol is its fragment header's next header, can have
			// this one: say so with frag, so the rule reads as what it does.
			withFrag := *r
			withFrag.Fragment = true
			return fmt.Errorf("proto %d matches IPv6 frames only in non-first fragments (extension headers are skipped and proto is the protocol after them; in a non-first fragment it is the fragment header's next header): add frag, as in %q", r.Proto, withFrag.String())
		}
	}
	return nil
}

// validatePrefix checks a rule's src or dst; field names it in the error
// ("src", "dst", or a command-line flag for ParsePrefix).
func validatePrefix(field string, p netip.Prefix) error {
	if p == (netip.Prefix{}) {
		return nil
	}
	if !p.IsValid() {
		return fmt.Errorf("%s %s is not a valid prefix", field, p)
	}
	a := p.Addr() // no zone: netip.PrefixFrom strips it
	if a.Is4In6() && p.Bits() >= 96 {
		return fmt.Errorf("%s %s is an IPv4-mapped IPv6 prefix, which never matches; write the IPv4 prefix %s", field, p, netip.PrefixFrom(a.Unmap(), p.Bits()-96).Masked())
	}
	if m := p.Masked(); m != p {
		return fmt.Errorf("%s %s has bits set after the prefix length; write %s (or %s/%d for the single address)", field, p, m, a, a.BitLen())
	}
	return nil
}

// isIPv6ExtHeader reports whether nh is an IPv6 extension header the frame
// parser skips: hop-by-hop, routing, fragment, AH, destination options.
func isIPv6ExtHeader(nh uint8) bool {
	switch nh {
	case 0, 43, 44, 51, 60:
		return true
	}
	return false
}

// RuleSet is a parsed rule file.
type RuleSet struct {
	Rules []Rule // in file order
	// Policy is the verdict for frames no rule matches: ActionPass (also
	// used when zero) or ActionDrop; ActionRedirect in redirect programs.
	Policy Action
	// Malformed is the verdict for frames the parser rejects as malformed:
	// ActionPass (also used when zero) or ActionDrop.
	Malformed Action
}

// EffectivePolicy returns rs.Policy, or ActionPass if it is zero.
func (rs *RuleSet) EffectivePolicy() Action {
	if rs.Policy == 0 {
		return ActionPass
	}
	return rs.Policy
}

// EffectiveMalformed returns rs.Malformed, or ActionPass if it is zero.
func (rs *RuleSet) EffectiveMalformed() Action {
	if rs.Malformed == 0 {
		return ActionPass
	}
	return rs.Malformed
}

// Validate checks a rule set built in code the way Parse checks a file:
// every rule valid, no prefix twice among prefix-only rules (wraps
// ErrDuplicatePrefix), at most MaxCompoundRules compound rules (wraps
// ErrTooManyRules) and MaxRules rules in all (wraps ErrCapacity), and
// valid Policy and Malformed verdicts.
func (rs *RuleSet) Validate() error {
	if rs.Policy != 0 && (!rs.Policy.valid() || rs.Policy == ActionLimit) {
		return fmt.Errorf("invalid policy %s (want pass, drop or redirect)", rs.Policy)
	}
	if rs.Malformed != 0 && rs.Malformed != ActionPass && rs.Malformed != ActionDrop {
		return fmt.Errorf("invalid malformed verdict %s (want pass or drop)", rs.Malformed)
	}
	if len(rs.Rules) > MaxRules {
		return fmt.Errorf("%d rules: %w: one fast-drop program holds at most %d rules; %s", len(rs.Rules), ErrCapacity, MaxRules, capacityAdvice)
	}
	seen := make(map[PrefixKey]int)
	compound := 0
	for i := range rs.Rules {
		r := &rs.Rules[i]
		if err := r.validate(); err != nil {
			return fmt.Errorf("rule %d (%s): %w", i, ruleWhere(*r), err)
		}
		if !r.IsPrefixOnly() {
			compound++
			if compound > MaxCompoundRules {
				return fmt.Errorf("rule %d (%s): %w: more than %d", i, ruleWhere(*r), ErrTooManyRules, MaxCompoundRules)
			}
			continue
		}
		k := r.PrefixKey()
		if j, ok := seen[k]; ok {
			return fmt.Errorf("rule %d (%s): %w: %s is also rule %d (%s)", i, ruleWhere(*r), ErrDuplicatePrefix, k, j, ruleWhere(rs.Rules[j]))
		}
		seen[k] = i
	}
	return nil
}

func ruleWhere(r Rule) string {
	if r.Line > 0 {
		return "line " + strconv.Itoa(r.Line)
	}
	return r.String()
}
