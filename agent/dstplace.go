package agent

import (
	"net/netip"

	"github.com/xdpdrop/xdpdrop/fastdrop"
)

// Destination-only routes ("destination V/32, discard", a victim under
// attack: the commonest FlowSpec route) go to the program's destination
// prefix table as "drop dst V/32" instead of the compound rule "drop
// ether ipv4 dst V/32": the compound table holds 256 rules in all, the
// prefix table millions. The two match the same frames (an IPv4 dst
// prefix matches only IPv4 frames), but are judged at different places:
// a compound FlowSpec rule in RFC 8955 order among the compound rules, a
// prefix rule after every compound rule that is not late (of any origin),
// before the source prefix rules, the longest destination prefix first.
//
// So a route's rule goes to the table only where that decides every
// frame as its compound rule would (docs/AGENT.md, "Destination-only
// routes"): no compound rule that the program judges before the table but
// that came after the route's rule (the FlowSpec routes after it in RFC
// 8955 order that stay compound, and the compound rules of the origins
// evaluated after agent:flowspec) can match a frame to its prefix with
// another effect, and no other origin holds a longer destination prefix
// inside it with another effect, or the same prefix. Among destination-
// only routes RFC 8955 puts the longer prefix first, as the table's
// longest match does. Otherwise it stays compound, exactly as before.

// dstForm returns the destination prefix rule of r, a FlowSpec rule, if r
// is "ACTION ether ipv4|ipv6 dst P" with nothing else but a sample
// modifier, and ACTION drop or pass.
func dstForm(r *fastdrop.Rule) (fastdrop.Rule, bool) {
	if r.Action != fastdrop.ActionDrop && r.Action != fastdrop.ActionPass || !r.Dst.IsValid() {
		return fastdrop.Rule{}, false
	}
	ether := uint16(fastdrop.EtherTypeIPv4)
	if r.Dst.Addr().Is6() {
		ether = fastdrop.EtherTypeIPv6
	}
	// (Text: how the rule was written is no part of its shape.)
	shape := fastdrop.Rule{Action: r.Action, EtherType: ether, Dst: r.Dst, Sample: r.Sample, Line: r.Line, Origin: r.Origin, Text: r.Text}
	if *r != shape {
		return fastdrop.Rule{}, false
	}
	return fastdrop.Rule{Action: r.Action, Dst: r.Dst, Sample: r.Sample, Origin: r.Origin}, true
}

// sameMatchKey is r's text, in its destination prefix form if it has one:
// the two forms of a rule have the same key.
func sameMatchKey(r *fastdrop.Rule) string {
	if d, ok := dstForm(r); ok {
		return d.String()
	}
	return r.String()
}

// sameEffect reports whether rules a and b do the same to a frame they
// both match: the same verdict, drop or pass, and the same sampling. (The
// frame is counted by the one that decides.)
func sameEffect(a, b *fastdrop.Rule) bool {
	return a.Action == b.Action && (a.Action == fastdrop.ActionDrop || a.Action == fastdrop.ActionPass) && a.Sample == b.Sample
}

// mayMatchDst reports whether compound rule c may match a frame whose
// destination is in p (false only when it surely cannot: its own
// destination prefix is disjoint from p, or it is of the other family).
func mayMatchDst(c *fastdrop.Rule, p netip.Prefix) bool {
	if c.Dst.IsValid() && !c.Dst.Overlaps(p) {
		return false
	}
	if c.Src.IsValid() && c.Src.Addr().Is4() != p.Addr().Is4() {
		return false
	}
	switch c.EtherType {
	case 0:
	case fastdrop.EtherTypeIPv4:
		return p.Addr().Is4()
	case fastdrop.EtherTypeIPv6:
		return p.Addr().Is6()
	default:
		return false // not IP: no destination address
	}
	return true
}

// placeDst puts the rules of rules (a FlowSpec rule set in RFC 8955
// order) that may go to the destination prefix table there, in place
// (their dstForm), and returns how many it put. blockers are the other
// origins' rules that DstBlockers returns. It decides from the last rule
// to the first: a rule's place depends only on the rules after it.
func placeDst(rules []fastdrop.Rule, blockers []fastdrop.Rule) int {
	var judgedFirst []*fastdrop.Rule // compound rules that would be judged before the table
	var held []*fastdrop.Rule        // other origins' destination prefix rules
	for i := range blockers {
		if blockers[i].IsPrefixOnly() {
			held = append(held, &blockers[i])
		} else {
			judgedFirst = append(judgedFirst, &blockers[i])
		}
	}
	placed := 0
	// The table's rules after this one: RFC 8955 puts a longer prefix
	// first, so none is inside the one before it; checked all the same
	// (as held), so that placeDst keeps any order's meaning.
	var after []*fastdrop.Rule
	for i := len(rules) - 1; i >= 0; i-- {
		d, ok := dstForm(&rules[i])
		if ok {
			ok = dstFits(&d, judgedFirst, held) && dstFits(&d, nil, after)
		}
		if !ok {
			judgedFirst = append(judgedFirst, &rules[i])
			continue
		}
		rules[i] = d
		after = append(after, &rules[i])
		placed++
	}
	return placed
}

// dstFits reports whether destination prefix rule d decides every frame
// as its compound form did, with judgedFirst judged before it and held in
// the table beside it.
func dstFits(d *fastdrop.Rule, judgedFirst, held []*fastdrop.Rule) bool {
	p := d.Dst
	for _, c := range judgedFirst {
		if mayMatchDst(c, p) && !sameEffect(c, d) {
			return false
		}
	}
	for _, h := range held {
		if h.Dst == p {
			return false // the table holds a prefix once
		}
		if h.Dst.Bits() > p.Bits() && p.Contains(h.Dst.Addr()) && !sameEffect(h, d) {
			return false
		}
	}
	return true
}

// The bgp max_rules default and ceiling: rules of every kind from BGP.
const (
	DefaultMaxBGPRules = 100_000
	MaxBGPRules        = 1_000_000
)

// dstBlockers returns the rules in force on ic's interface that bear on
// which of origin's rules may go to the destination prefix table
// (fastdrop.Engine.DstBlockers; none if nothing is attached there).
func (k *kernelPlane) dstBlockers(ic InterfaceConfig, origin string) ([]fastdrop.Rule, error) {
	return k.rulesOf(ic, func(eng *fastdrop.Engine) ([]fastdrop.Rule, error) { return eng.DstBlockers(origin) })
}
