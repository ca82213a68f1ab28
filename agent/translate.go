package agent

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"strconv"
	"strings"

	"github.com/osrg/gobgp/v3/pkg/packet/bgp"

	"github.com/xdpdrop/xdpdrop/fastdrop"
)

// A FlowSpec route is translated into rules of the rule language, or
// refused. The translation is exact or nothing:
//
//   - each numeric component (RFC 8955 section 4.2.1.1) is evaluated into
//     the set of values it matches (AND binds tighter than OR, as the RFC
//     says) and written as a value list, or, where the rule language has
//     no lists for that field, as one rule per range;
//   - each bitmask component (TCP flags, fragment) becomes a disjunction of
//     "these bits set, those clear", one rule per term;
//   - what a component implies about the protocol (ports: TCP or UDP;
//     ICMP type and code: ICMP; TCP flags: TCP) is written out, and an
//     IPv4 route only matches IPv4 frames (ether ipv4), an IPv6 one IPv6;
//   - every rule text is parsed by the rule language itself: a field or a
//     syntax it does not have yet makes the parse fail, and the route is
//     refused with that reason. Nothing is ever dropped from a route to
//     make it fit.

// ErrRefused is wrapped by Translate's errors: the route cannot be
// expressed exactly and is not installed.
var ErrRefused = errors.New("refused")

// Route is one FlowSpec route: its family (4 or 6), its NLRI components
// and its extended communities (the actions, RFC 8955 section 7).
type Route struct {
	Family     int
	Components []bgp.FlowSpecComponentInterface
	Actions    []bgp.ExtendedCommunityInterface
}

// Translation is what a route becomes.
type Translation struct {
	// Rules are the route's rules, in order; empty for a route that asks
	// for nothing (no filtering action, and evaluation continues).
	Rules []fastdrop.Rule
	// Verdict is the action as written in the rules: drop, pass, limit ...
	Verdict string
}

// TranslateOptions tune Translate.
type TranslateOptions struct {
	// MaxRules caps the rules one route may expand into (default 64).
	MaxRules int
	// SampleOneIn is the N of `sample 1/N` for a route with the
	// traffic-action sample bit (default DefaultSampleOneIn).
	SampleOneIn uint32
}

// FlowSpec component types (RFC 8955 section 4.2.2, RFC 8956 section 3).
const (
	fsDstPrefix = 1
	fsSrcPrefix = 2
	fsProto     = 3
	fsPort      = 4
	fsDstPort   = 5
	fsSrcPort   = 6
	fsICMPType  = 7
	fsICMPCode  = 8
	fsTCPFlags  = 9
	fsLen       = 10
	fsDSCP      = 11
	fsFragment  = 12
	fsFlowLabel = 13 // RFC 8956, IPv6 only
)

// numericFields are the numeric components: rule keyword and domain.
var numericFields = map[int]struct {
	kw  string
	max uint64
}{
	fsProto:     {"proto", 255},
	fsPort:      {"port", 65535},
	fsDstPort:   {"dport", 65535},
	fsSrcPort:   {"sport", 65535},
	fsICMPType:  {"type", 255},
	fsICMPCode:  {"code", 255},
	fsLen:       {"len", 65535},
	fsDSCP:      {"dscp", 63},
	fsFlowLabel: {"flowlabel", 1<<20 - 1},
}

// Bit names of the bitmask components, as the rule language writes them.
var (
	tcpFlagNames = []string{"fin", "syn", "rst", "psh", "ack", "urg", "ece", "cwr"}
	// IsF (bit 1) is "a fragment other than the first" (RFC 8955
	// 4.2.2.12), which the rule language writes any,!first: see fragIsF.
	fragNames4    = []string{"df", "", "first", "last"}
	fragNames6    = []string{"", "", "first", "last"} // no DF in IPv6 (RFC 8956 section 3.6)
	componentName = map[int]string{
		fsDstPrefix: "destination prefix", fsSrcPrefix: "source prefix", fsProto: "protocol",
		fsPort: "port", fsDstPort: "destination port", fsSrcPort: "source port",
		fsICMPType: "ICMP type", fsICMPCode: "ICMP code", fsTCPFlags: "TCP flags",
		fsLen: "packet length", fsDSCP: "DSCP", fsFragment: "fragment", fsFlowLabel: "flow label",
	}
)

// errTooMany: a route would expand into more rules than allowed.
var errTooMany = fmt.Errorf("%w", ErrRefused)

// parseReasonOf is the part of a refusal after "refused: ".
func parseReasonOf(err error) string {
	return strings.TrimPrefix(err.Error(), ErrRefused.Error()+": ")
}

func refusef(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrRefused}, args...)...)
}

type term struct{ kw, val string }

// alt is a conjunction of rule words; a part is a disjunction of alts, in
// a compact form (value lists) and an expanded one (one alt per range).
type alt []term

type part struct{ compact, expanded []alt }

// translate is Translate but for the sample bit.
func translate(r Route, opts TranslateOptions) (Translation, error) {
	if opts.MaxRules <= 0 {
		opts.MaxRules = 64
	}
	if r.Family != 4 && r.Family != 6 {
		return Translation{}, refusef("address family %d", r.Family)
	}
	verdict, continues, err := translateActions(r.Actions)
	if err != nil {
		return Translation{}, err
	}
	byType := map[int]bgp.FlowSpecComponentInterface{}
	prev := 0
	for _, c := range r.Components {
		t := int(c.Type())
		if _, ok := c.(*bgp.FlowSpecUnknown); ok {
			return Translation{}, refusef("unknown component type %d", t)
		}
		if byType[t] != nil || t < prev {
			return Translation{}, refusef("component type %d out of order or twice (RFC 8955 section 4.2: malformed)", t)
		}
		prev = t
		byType[t] = c
	}
	if verdict == "" && continues {
		// No filtering action, and evaluation goes on: the route asks
		// for nothing a rule would do.
		return Translation{Verdict: "none"}, nil
	}
	if verdict == "" {
		verdict = "pass" // no action: the traffic is accepted (and evaluation stops)
	} else if continues && verdict != "drop" {
		return Translation{}, refusef("terminal-action bit set with %s: the rule language stops at the first rule that matches, so the traffic it lets through cannot go on to later routes", verdict)
	}

	ether := "ipv4"
	if r.Family == 6 {
		ether = "ipv6"
	}
	head := alt{{"ether", ether}}
	var parts []part
	protos := full(255)
	hasProto := false
	var numeric = map[int]ivals{}
	for _, c := range r.Components {
		t := int(c.Type())
		switch t {
		case fsDstPrefix, fsSrcPrefix:
			p, off, err := prefixOf(c, r.Family)
			if err != nil {
				return Translation{}, err
			}
			kw := "dst"
			if t == fsSrcPrefix {
				kw = "src"
			}
			v := p.String()
			if off != 0 {
				v += "/" + strconv.Itoa(off) // ADDR/LEN/OFF: bits OFF to LEN-1
			}
			head = append(head, term{kw, v})
		case fsTCPFlags, fsFragment:
		default:
			nf, ok := numericFields[t]
			if !ok || (t == fsFlowLabel && r.Family != 6) {
				return Translation{}, refusef("component type %d is not defined for IPv%d", t, r.Family)
			}
			comp, ok := c.(*bgp.FlowSpecComponent)
			if !ok {
				return Translation{}, refusef("component type %d is not a numeric component", t)
			}
			set, err := numericSet(comp.Items, nf.max)
			if err != nil {
				return Translation{}, fmt.Errorf("%s: %w", componentName[t], err)
			}
			numeric[t] = set
		}
	}
	// What the components imply about the protocol.
	icmp := uint64(fastdrop.ProtoICMP)
	if r.Family == 6 {
		icmp = fastdrop.ProtoICMPv6
	}
	need := func(set ivals, why string) error {
		protos = protos.intersect(set)
		hasProto = true
		if len(protos) == 0 {
			return refusef("matches no packet: %s", why)
		}
		return nil
	}
	if s, ok := numeric[fsProto]; ok {
		if err := need(s, "no protocol"); err != nil {
			return Translation{}, err
		}
	}
	tcpUDP := ivals{{fastdrop.ProtoTCP, fastdrop.ProtoTCP}, {fastdrop.ProtoUDP, fastdrop.ProtoUDP}}
	for _, t := range []int{fsPort, fsDstPort, fsSrcPort} {
		if _, ok := numeric[t]; ok {
			if err := need(tcpUDP, "ports are TCP's or UDP's and the protocol is neither"); err != nil {
				return Translation{}, err
			}
		}
	}
	for _, t := range []int{fsICMPType, fsICMPCode} {
		if _, ok := numeric[t]; ok {
			if err := need(ivals{{icmp, icmp}}, "an ICMP type or code asks for ICMP and the other components for another protocol"); err != nil {
				return Translation{}, err
			}
		}
	}
	if byType[fsTCPFlags] != nil {
		if err := need(ivals{{fastdrop.ProtoTCP, fastdrop.ProtoTCP}}, "TCP flags ask for TCP and the other components for another protocol"); err != nil {
			return Translation{}, err
		}
	}
	if hasProto {
		parts = append(parts, protoPart(protos))
	}
	for _, t := range []int{fsPort, fsDstPort, fsSrcPort, fsICMPType, fsICMPCode, fsTCPFlags, fsLen, fsDSCP, fsFragment, fsFlowLabel} {
		c := byType[t]
		if c == nil {
			continue
		}
		switch t {
		case fsTCPFlags, fsFragment:
			p, err := bitmaskPart(t, c, r.Family)
			if err != nil {
				return Translation{}, fmt.Errorf("%s: %w", componentName[t], err)
			}
			if p != nil {
				parts = append(parts, *p)
			}
			continue
		}
		set := numeric[t]
		nf := numericFields[t]
		if len(set) == 0 {
			return Translation{}, refusef("matches no packet: the %s component matches no value", componentName[t])
		}
		if set.isFull(nf.max) {
			continue // any value: what it implies is already written
		}
		hex := t == fsFlowLabel
		text := set.list(hex)
		if t != fsLen {
			// The rule language's field has FlowSpec's domain (len's
			// reaches past 65535 for IPv6: a negation would widen it).
			text = set.listOrNot(nf.max, hex)
		}
		p := part{compact: []alt{{{nf.kw, text}}}}
		for _, v := range set {
			if t == fsPort {
				p.expanded = append(p.expanded, alt{{"sport", v.text(hex)}}, alt{{"dport", v.text(hex)}})
			} else {
				p.expanded = append(p.expanded, alt{{nf.kw, v.text(hex)}})
			}
		}
		if t == fsPort && len(p.expanded) > 0 {
			// sport OR dport, each over the ranges: keep the sport alts
			// first, then dport (the order does not change what matches).
			var s, d []alt
			for i, a := range p.expanded {
				if i%2 == 0 {
					s = append(s, a)
				} else {
					d = append(d, a)
				}
			}
			p.expanded = append(s, d...)
		}
		parts = append(parts, p)
	}

	compact, err := build(verdict, head, parts, false, opts.MaxRules)
	if err == nil {
		return Translation{Rules: compact, Verdict: verdict}, nil
	}
	expanded, err2 := build(verdict, head, parts, true, opts.MaxRules)
	if err2 == nil {
		return Translation{Rules: expanded, Verdict: verdict}, nil
	}
	if errors.Is(err2, errTooMany) {
		// The rule language lacks lists here, and one rule per range
		// would be too many.
		return Translation{}, fmt.Errorf("%w (%s)", err2, parseReasonOf(err))
	}
	return Translation{}, err
}

// build makes the rules of the cross product of parts, each parsed by the
// rule language.
func build(verdict string, head alt, parts []part, expanded bool, maxRules int) ([]fastdrop.Rule, error) {
	alts := []alt{head}
	for _, p := range parts {
		choices := p.compact
		if expanded && p.expanded != nil {
			choices = p.expanded
		}
		if len(alts)*len(choices) > maxRules {
			return nil, fmt.Errorf("%w: needs more than %d rules (bgp max_rules_per_route)", errTooMany, maxRules)
		}
		var next []alt
		for _, a := range alts {
			for _, c := range choices {
				next = append(next, append(append(alt{}, a...), c...))
			}
		}
		alts = next
	}
	rules := make([]fastdrop.Rule, 0, len(alts))
	for _, a := range alts {
		var b strings.Builder
		b.WriteString(verdict)
		for _, t := range a {
			b.WriteByte(' ')
			b.WriteString(t.kw)
			if t.val != "" {
				b.WriteByte(' ')
				b.WriteString(t.val)
			}
		}
		rs, err := fastdrop.Parse(strings.NewReader(b.String()), "flowspec")
		if err != nil {
			return nil, refusef("the rule language cannot say %q yet: %s", b.String(), parseReason(err))
		}
		if len(rs.Rules) != 1 {
			return nil, refusef("%q is not one rule", b.String())
		}
		rule := rs.Rules[0]
		rule.Line = 0
		rules = append(rules, rule)
	}
	return rules, nil
}

// parseReason is the parser's message without its "flowspec:1: " prefix.
func parseReason(err error) string {
	var pe *fastdrop.ParseError
	if errors.As(err, &pe) {
		return pe.Msg
	}
	return err.Error()
}

func protoPart(protos ivals) part {
	names := map[uint64]string{fastdrop.ProtoTCP: "tcp", fastdrop.ProtoUDP: "udp", fastdrop.ProtoICMP: "icmp", fastdrop.ProtoICMPv6: "icmpv6"}
	one := func(v uint64) alt {
		if n, ok := names[v]; ok {
			return alt{{n, ""}}
		}
		return alt{{"proto", strconv.FormatUint(v, 10)}}
	}
	p := part{}
	if protos.count() == 1 {
		p.compact = []alt{one(protos[0].lo)}
		return p
	}
	words := make([]string, len(protos))
	for i, v := range protos {
		words[i] = v.text(false)
		if n, ok := names[v.lo]; ok && v.lo == v.hi {
			words[i] = n
		}
	}
	p.compact = []alt{{{"proto", strings.Join(words, ",")}}}
	if protos.count() <= 256 {
		for _, v := range protos {
			for x := v.lo; x <= v.hi; x++ {
				p.expanded = append(p.expanded, one(x))
			}
		}
	}
	return p
}

// prefixOf is the prefix of a destination or source prefix component,
// and for IPv6 its offset (RFC 8956 section 3.1: the component matches
// bits off to the length - 1 of the address). GoBGP gives an IPv6
// component's pattern as an address with its bits in place (as it and
// ExaBGP write one: 0:db8::/64/16); the bits before the offset are not
// part of the match, so they are cleared (which neither widens nor
// narrows it), as are those past the length.
func prefixOf(c bgp.FlowSpecComponentInterface, family int) (netip.Prefix, int, error) {
	var ip []byte
	var bits, off int
	switch v := c.(type) {
	case *bgp.FlowSpecDestinationPrefix:
		p, ok := v.Prefix.(*bgp.IPAddrPrefix)
		if !ok {
			return netip.Prefix{}, 0, refusef("destination prefix of another family")
		}
		ip, bits = p.Prefix.To4(), int(p.Length)
	case *bgp.FlowSpecSourcePrefix:
		p, ok := v.Prefix.(*bgp.IPAddrPrefix)
		if !ok {
			return netip.Prefix{}, 0, refusef("source prefix of another family")
		}
		ip, bits = p.Prefix.To4(), int(p.Length)
	case *bgp.FlowSpecDestinationPrefix6:
		p, ok := v.Prefix.(*bgp.IPv6AddrPrefix)
		if !ok {
			return netip.Prefix{}, 0, refusef("destination prefix of another family")
		}
		ip, bits, off = p.Prefix.To16(), int(p.Length), int(v.Offset)
	case *bgp.FlowSpecSourcePrefix6:
		p, ok := v.Prefix.(*bgp.IPv6AddrPrefix)
		if !ok {
			return netip.Prefix{}, 0, refusef("source prefix of another family")
		}
		ip, bits, off = p.Prefix.To16(), int(p.Length), int(v.Offset)
	default:
		return netip.Prefix{}, 0, refusef("prefix component of an unknown kind")
	}
	a, ok := netip.AddrFromSlice(ip)
	if !ok || (family == 4) != a.Is4() {
		return netip.Prefix{}, 0, refusef("prefix of the wrong family")
	}
	p, err := a.Prefix(bits) // masked: bits past the length are not part of the match
	if err != nil {
		return netip.Prefix{}, 0, refusef("prefix length %d", bits)
	}
	if off == 0 {
		return p, 0, nil
	}
	if off >= bits {
		// RFC 8956 3.1: offset < length < 129, or the component is
		// malformed (length 0 and offset 0 match every address).
		return netip.Prefix{}, 0, refusef("prefix %s with offset %d: the offset is not below the length, which RFC 8956 section 3.1 calls malformed", p, off)
	}
	b := p.Addr().As16()
	for i := 0; i < off; i++ {
		b[i/8] &^= 0x80 >> (i % 8)
	}
	return netip.PrefixFrom(netip.AddrFrom16(b), bits), off, nil
}

// Operator bits (RFC 8955 section 4.2.1).
const (
	opEnd   = 0x80
	opAnd   = 0x40
	opLen   = 0x30
	opLT    = 0x04
	opGT    = 0x02
	opEQ    = 0x01
	opNot   = 0x02
	opMatch = 0x01
)

// numericSet evaluates a numeric_op list into the set of values of 0..max
// it matches: ANDed terms form groups, groups are ORed.
func numericSet(items []*bgp.FlowSpecComponentItem, max uint64) (ivals, error) {
	if len(items) == 0 {
		return nil, refusef("no values")
	}
	var out ivals
	var group ivals
	for i, it := range items {
		if it.Op&0x08 != 0 {
			return nil, refusef("numeric operator 0x%02x has its reserved bit set (malformed)", it.Op)
		}
		s := termSet(it.Op&opLT != 0, it.Op&opGT != 0, it.Op&opEQ != 0, it.Value, max)
		if i > 0 && it.Op&opAnd != 0 {
			group = group.intersect(s)
			continue
		}
		if i > 0 {
			out = out.union(group)
		}
		group = s
	}
	return out.union(group), nil
}

// conj is "the bits of set are 1 and those of clear are 0".
type conj struct{ set, clear uint64 }

// bitmaskDNF evaluates a bitmask_op list (RFC 8955 section 4.2.1.2) into a
// disjunction of conjunctions; an empty result matches nothing, a result
// holding conj{} matches everything.
func bitmaskDNF(items []*bgp.FlowSpecComponentItem) ([]conj, error) {
	if len(items) == 0 {
		return nil, refusef("no values")
	}
	var out, group []conj
	for i, it := range items {
		if it.Op&0x0c != 0 {
			return nil, refusef("bitmask operator 0x%02x has reserved bits set (malformed)", it.Op)
		}
		v := it.Value
		var t []conj
		var bits []uint64
		for b := uint64(1); b != 0 && b <= v; b <<= 1 {
			if v&b != 0 {
				bits = append(bits, b)
			}
		}
		not, match := it.Op&opNot != 0, it.Op&opMatch != 0
		switch {
		case match && !not: // all of v set
			t = []conj{{set: v}}
		case match && not: // not all of v set: one of them clear
			for _, b := range bits {
				t = append(t, conj{clear: b})
			}
		case !match && !not: // any of v set
			for _, b := range bits {
				t = append(t, conj{set: b})
			}
		default: // none of v set
			t = []conj{{clear: v}}
		}
		if i > 0 && it.Op&opAnd != 0 {
			var g []conj
			for _, a := range group {
				for _, b := range t {
					c := conj{a.set | b.set, a.clear | b.clear}
					if c.set&c.clear == 0 {
						g = append(g, c)
					}
				}
			}
			group = g
			continue
		}
		if i > 0 {
			out = append(out, group...)
		}
		group = t
	}
	out = append(out, group...)
	// Drop duplicates, keep order.
	seen := map[conj]bool{}
	uniq := out[:0]
	for _, c := range out {
		if !seen[c] {
			seen[c] = true
			uniq = append(uniq, c)
		}
	}
	return uniq, nil
}

// bitmaskPart writes a TCP flags or fragment component: one alt per
// conjunction, "flags syn,!ack". nil: the component matches every packet
// of its kind (only what it implies remains).
func bitmaskPart(t int, c bgp.FlowSpecComponentInterface, family int) (*part, error) {
	comp, ok := c.(*bgp.FlowSpecComponent)
	if !ok {
		return nil, refusef("not a bitmask component")
	}
	dnf, err := bitmaskDNF(comp.Items)
	if err != nil {
		return nil, err
	}
	if len(dnf) == 0 {
		return nil, refusef("matches no packet")
	}
	kw, names := "flags", tcpFlagNames
	if t == fsFragment {
		kw, names = "frag", fragNames4
		if family == 6 {
			names = fragNames6
		}
	}
	p := &part{}
	for _, cj := range dnf {
		if cj == (conj{}) {
			return nil, nil // this disjunct matches all: so does the component
		}
		var words []string
		if t == fsFragment {
			w, ok, err := fragIsF(cj)
			if err != nil {
				return nil, err
			}
			if !ok {
				continue // IsF with FF set: no packet is both
			}
			words = w
			cj.set &^= fragIsFBit
			cj.clear &^= fragIsFBit
			if len(words) > 0 {
				cj.set &^= fragFFBit // fragIsF wrote !first already
				cj.clear &^= fragFFBit
			}
		}
		for i := 0; i < 64; i++ {
			b := uint64(1) << i
			if (cj.set|cj.clear)&b == 0 {
				continue
			}
			if i >= len(names) || names[i] == "" {
				if t == fsTCPFlags {
					return nil, refusef("TCP flag bit 0x%x (octet 13 of the TCP header) has no name in the rule language", b)
				}
				return nil, refusef("fragment bit 0x%x is not defined for IPv%d", b, family)
			}
			if cj.clear&b != 0 {
				words = append(words, "!"+names[i])
			} else {
				words = append(words, names[i])
			}
		}
		p.compact = append(p.compact, alt{{kw, strings.Join(words, ",")}})
	}
	if len(p.compact) == 0 {
		return nil, refusef("matches no packet")
	}
	return p, nil
}

// The fragment component's IsF and FF bits (RFC 8955 4.2.2.12).
const (
	fragIsFBit = 1 << 1
	fragFFBit  = 1 << 2
)

// fragIsF translates the IsF bit of one conjunction of a fragment
// component. IsF set, "a fragment other than the first", is any,!first in
// the rule language (any alone would widen it to first fragments); with FF
// set too, the conjunction matches no packet (ok false). IsF clear
// ("unfragmented or a first fragment") is two alternatives, which one rule
// cannot say: refused, never widened.
func fragIsF(cj conj) (words []string, ok bool, err error) {
	switch {
	case cj.clear&fragIsFBit != 0:
		return nil, false, refusef("fragment bit IsF clear (not a fragment other than the first) is unfragmented or first fragments: the rule language has no one rule for it")
	case cj.set&fragIsFBit == 0:
		return nil, true, nil
	case cj.set&fragFFBit != 0:
		return nil, false, nil
	}
	return []string{"any", "!first"}, true, nil
}

// FlowSpec action extended communities (RFC 8955 section 7, and the
// redirect variants of RFC 7674 and draft-ietf-idr-flowspec-redirect-ip).
const (
	ecTypeFlowSpec   = 0x80
	ecTypeFlowSpec2  = 0x81
	ecTypeFlowSpec3  = 0x82
	ecTypeRedirectIP = 0x08
	ecRateBytes      = 0x06
	ecAction         = 0x07
	ecRedirect       = 0x08
	ecMarking        = 0x09
	ecRedirectIP6    = 0x0b
	ecRatePackets    = 0x0c
)

// translateActions reads the FlowSpec actions: the verdict ("" = none),
// and whether the terminal-action bit asks evaluation to go on.
func translateActions(ecs []bgp.ExtendedCommunityInterface) (verdict string, continues bool, err error) {
	rates := 0
	for _, ec := range ecs {
		typ, sub := ec.GetTypes()
		switch v := ec.(type) {
		case *bgp.TrafficRateExtended:
			rates++
			verdict, err = rateVerdict(float64(v.Rate), "byte")
			if err != nil {
				return "", false, err
			}
			continue
		case *bgp.TrafficActionExtended:
			continues = v.Terminal // the sample bit: see Translate
			continue
		case *bgp.TrafficRemarkExtended:
			return "", false, refusef("traffic-marking (DSCP %d): xdpdrop does not rewrite packets", v.DSCP)
		case *bgp.RedirectTwoOctetAsSpecificExtended, *bgp.RedirectIPv4AddressSpecificExtended, *bgp.RedirectFourOctetAsSpecificExtended:
			return "", false, refusef("redirect to VRF: xdpdrop has no VRFs to redirect to")
		case *bgp.RedirectIPv6AddressSpecificExtended:
			return "", false, refusef("redirect to VRF: xdpdrop has no VRFs to redirect to")
		}
		b, serr := ec.Serialize()
		if serr != nil || len(b) != 8 {
			continue
		}
		t := b[0] &^ 0x40 // the transitive bit does not change the meaning
		switch {
		case t == ecTypeFlowSpec && b[1] == ecRatePackets:
			rates++
			verdict, err = rateVerdict(float64(math.Float32frombits(binary.BigEndian.Uint32(b[4:]))), "packet")
			if err != nil {
				return "", false, err
			}
		case t == ecTypeRedirectIP && b[1] == 0x00, (t == 0x01 || t == 0x00) && b[1] == 0x0c:
			return "", false, refusef("redirect to IP: xdpdrop does not forward")
		case (t == ecTypeFlowSpec || t == ecTypeFlowSpec2 || t == ecTypeFlowSpec3) && (b[1] == ecRateBytes || b[1] == ecAction || b[1] == ecRedirect || b[1] == ecMarking || b[1] == ecRedirectIP6):
			return "", false, refusef("FlowSpec action type 0x%02x subtype 0x%02x is not supported", b[0], b[1])
		}
		_ = typ
		_ = sub
	}
	if rates > 1 {
		return "", false, refusef("%d traffic-rate actions: which one applies is not defined", rates)
	}
	return verdict, continues, nil
}

// rateVerdict is the verdict of a traffic-rate action: 0 discards, N
// polices to N bytes (or packets) per second with limit.
func rateVerdict(rate float64, unit string) (string, error) {
	if math.IsNaN(rate) || rate < 0 || math.IsInf(rate, 0) {
		return "", refusef("traffic-rate %v: not a rate", rate)
	}
	if rate == 0 {
		return "drop", nil
	}
	if _, err := fastdrop.ParseAction("limit"); err != nil {
		return "", refusef("traffic-rate %.0f %ss/s: the rule language has no limit action yet", rate, unit)
	}
	n := uint64(math.Round(rate))
	if unit == "byte" {
		return "limit " + strconv.FormatUint(n, 10) + "byte/s", nil
	}
	return "limit " + strconv.FormatUint(n, 10) + "/s", nil
}
