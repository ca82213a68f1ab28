package agent

import (
	"bytes"

	"github.com/osrg/gobgp/v3/pkg/packet/bgp"
)

// comparePrecedence orders two routes of one family as RFC 8955 section
// 5.1 does (and RFC 8956 section 4 for IPv6): negative if a comes first
// (has precedence), positive if b does, 0 if they are equal. Components
// are compared in type order; a route that has a component type the other
// lacks (at the first place they differ) comes first; prefixes that
// differ in their common part go lowest address first, else longest
// first; other components compare as byte strings, and when one is a
// prefix of the other, the longer comes first.
func comparePrecedence(a, b Route) int {
	for i := 0; ; i++ {
		switch {
		case i >= len(a.Components) && i >= len(b.Components):
			return 0
		case i >= len(a.Components):
			return 1 // b has a component where a has ended
		case i >= len(b.Components):
			return -1
		}
		ca, cb := a.Components[i], b.Components[i]
		ta, tb := ca.Type(), cb.Type()
		if ta != tb {
			if ta < tb {
				return -1
			}
			return 1
		}
		if ta == bgp.FLOW_SPEC_TYPE_DST_PREFIX || ta == bgp.FLOW_SPEC_TYPE_SRC_PREFIX {
			if c := comparePrefixes(ca, cb, a.Family); c != 0 {
				return c
			}
			continue
		}
		pa, _ := ca.Serialize()
		pb, _ := cb.Serialize()
		n := min(len(pa), len(pb))
		if c := bytes.Compare(pa[:n], pb[:n]); c != 0 {
			return c
		}
		if len(pa) != len(pb) {
			if len(pa) > len(pb) {
				return -1
			}
			return 1
		}
	}
}

func comparePrefixes(ca, cb bgp.FlowSpecComponentInterface, family int) int {
	if oa, ob := prefixOffset(ca), prefixOffset(cb); oa != ob {
		// RFC 8956 section 4: the lower offset first.
		if oa < ob {
			return -1
		}
		return 1
	}
	// Equal offsets: the patterns compare as prefixes (prefixOf
	// clears the bits before the offset of both).
	pa, _, erra := prefixOf(ca, family)
	pb, _, errb := prefixOf(cb, family)
	if erra != nil || errb != nil {
		return 0
	}
	common := min(pa.Bits(), pb.Bits())
	ma, _ := pa.Addr().Prefix(common)
	mb, _ := pb.Addr().Prefix(common)
	if c := ma.Addr().Compare(mb.Addr()); c != 0 {
		return c
	}
	switch {
	case pa.Bits() > pb.Bits():
		return -1
	case pa.Bits() < pb.Bits():
		return 1
	}
	return 0
}

// prefixOffset is an IPv6 prefix component's offset (0 for IPv4).
func prefixOffset(c bgp.FlowSpecComponentInterface) uint8 {
	switch v := c.(type) {
	case *bgp.FlowSpecDestinationPrefix6:
		return v.Offset
	case *bgp.FlowSpecSourcePrefix6:
		return v.Offset
	}
	return 0
}
