package benchmark

import (
	"math/rand/v2"
	"net/netip"

	"github.com/xdpdrop/xdpdrop/fastdrop"
)

// trafficPrefix holds every source address the generator uses (it varies
// the low 16 bits of 198.18.0.2): the rule that drops the traffic.
var trafficPrefix = netip.MustParsePrefix("198.18.0.0/15")

// blocklist returns a rule set of n "drop src PREFIX" rules shaped like a
// large IPv4 blocklist, the same for every run: one rule covers the
// generated traffic, the others are 60% /24s, 25% /16-/23s and 15% /32s
// spread over the unicast space. Policy pass.
func blocklist(n int) *fastdrop.RuleSet {
	rng := rand.New(rand.NewPCG(7, 2544))
	seen := make(map[uint64]bool, n)
	key := func(p netip.Prefix) uint64 {
		a := p.Addr().As4()
		return uint64(a[0])<<40 | uint64(a[1])<<32 | uint64(a[2])<<24 | uint64(a[3])<<16 | uint64(p.Bits())
	}
	ps := make([]netip.Prefix, 0, n)
	ps = append(ps, trafficPrefix)
	seen[key(trafficPrefix)] = true
	for len(ps) < n {
		var bits int
		switch r := rng.IntN(100); {
		case r < 60:
			bits = 24
		case r < 85:
			bits = 16 + rng.IntN(8)
		default:
			bits = 32
		}
		v := rng.Uint32()
		a := netip.AddrFrom4([4]byte{byte(1 + rng.IntN(223)), byte(v >> 16), byte(v >> 8), byte(v)})
		p, _ := a.Prefix(bits)
		if p.Overlaps(trafficPrefix) || seen[key(p)] {
			continue
		}
		seen[key(p)] = true
		ps = append(ps, p)
	}
	return &fastdrop.RuleSet{Rules: fastdrop.PrefixRules(fastdrop.ActionDrop, ps), Policy: fastdrop.ActionPass}
}
