package fastdrop

import (
	"fmt"
	"strings"
	"unsafe"

	"github.com/xdpdrop/xdpdrop/gen"
)

// Fragment bits (PARSE_FRAG_* in bpf/parsing.h): a frame's value of the
// frag field with bits (FlowSpec type 12, RFC 8955 4.2.2.12, RFC 8956
// 3.6), computed from the IPv4 flags and fragment offset or the IPv6
// fragment header.
const (
	FragDF    uint8 = 0x01 // IPv4 don't fragment
	FragNF    uint8 = 0x02 // IsF: a fragment other than the first (offset != 0)
	FragFirst uint8 = 0x04 // FF: offset 0, more fragments
	FragLast  uint8 = 0x08 // LF: offset != 0, no more fragments
	FragAny   uint8 = 0x10 // a fragment: offset != 0 or more fragments
	fragV6    uint8 = 0x20 // an IPv6 packet (no DF bit); never in a rule
)

// fragNames are the names of the bits a rule may name, in String's order.
var fragNames = []struct {
	name string
	bit  uint8
}{{"any", FragAny}, {"first", FragFirst}, {"last", FragLast}, {"df", FragDF}}

const wantFrag = "want frag alone (a fragment other than the first), or fragment bits any, first, last, df separated by commas, each set, or clear with !, as in first or !df or any,!df"

// FragBits is what frag with bits matches (zero: no such field): every bit of Set set and every
// bit of Clear clear, the others any (FlowSpec's bitmask match). A rule
// that names df, set or clear, matches only IPv4 packets: IPv6 has no DF
// bit.
type FragBits struct{ Set, Clear uint8 }

// fragBitsOf returns a packet's fragment bits from its fragment offset (13
// bits) and more-fragments flag (frag_bits in bpf/parsing.h).
func fragBitsOf(off uint16, more bool) uint8 {
	switch {
	case off != 0 && more:
		return FragNF | FragAny
	case off != 0:
		return FragNF | FragAny | FragLast
	case more:
		return FragFirst | FragAny
	}
	return 0
}

// Matches reports whether a packet's fragment bits b match f.
func (f FragBits) Matches(b uint8) bool {
	if (f.Set|f.Clear)&FragDF != 0 && b&fragV6 != 0 {
		return false
	}
	return b&f.Set == f.Set && b&f.Clear == 0
}

func (f FragBits) String() string {
	var names []string
	for _, n := range fragNames {
		switch {
		case f.Set&n.bit != 0:
			names = append(names, n.name)
		case f.Clear&n.bit != 0:
			names = append(names, "!"+n.name)
		}
	}
	return strings.Join(names, ",")
}

// isFragValue reports whether s is meant as a value of frag (and is not
// the next keyword): it starts with ! or with the name of a fragment bit
// (parseFragBits then says what is wrong with the rest).
func isFragValue(s string) bool {
	if strings.HasPrefix(s, "!") {
		return true
	}
	first, _, _ := strings.Cut(s, ",")
	for _, n := range fragNames {
		if n.name == first {
			return true
		}
	}
	return false
}

// parseFragBits parses frag's bits: NAME[,NAME...], a NAME maybe with !.
func parseFragBits(s string) (*FragBits, string) {
	f := &FragBits{}
	for _, name := range strings.Split(s, ",") {
		clear := false
		if n, ok := strings.CutPrefix(name, "!"); ok {
			name, clear = n, true
		}
		var bit uint8
		for _, n := range fragNames {
			if n.name == name {
				bit = n.bit
			}
		}
		if bit == 0 {
			return nil, fmt.Sprintf("unknown fragment bit %q (%s)", clipped(name), wantFrag)
		}
		if (f.Set|f.Clear)&bit != 0 {
			return nil, fmt.Sprintf("%s given twice (name each bit once)", name)
		}
		if clear {
			f.Clear |= bit
		} else {
			f.Set |= bit
		}
	}
	return f, ""
}

// fragBitsField is the entry of frag with bits. It has no keyword of its
// own (sub): the frag entry reads its value and sets Rule.FragBits.
func fragBitsField() matchField {
	return matchField{
		name:     "frag",
		sub:      true,
		examples: []string{"drop dst 198.51.100.0/24 frag first", "drop udp frag !df", "drop frag any", "drop frag last", "pass src 2001:db8::/32 frag first", "drop udp dport 53 frag first,!df", "drop frag any,!first"},
		need:     "frag needs fragment bits (" + wantFrag + ")",
		parse: func(r *Rule, v string) string {
			f, msg := parseFragBits(v)
			if msg != "" {
				return fmt.Sprintf("frag %s: %s", clipped(v), msg)
			}
			r.FragBits = *f
			return ""
		},
		at:      unsafe.Offsetof(Rule{}.FragBits),
		store:   storeB2,
		text:    func(r *Rule) string { return "frag " + r.FragBits.String() },
		textPos: 14,
		ip:      true,
		check: func(r *Rule) error {
			f := r.FragBits
			switch {
			case f.Set|f.Clear == 0:
				return fmt.Errorf("frag with no fragment bits (%s)", wantFrag)
			case f.Set&f.Clear != 0, (f.Set|f.Clear)&^(FragAny|FragFirst|FragLast|FragDF) != 0:
				return fmt.Errorf("frag %s: a bit both set and clear, or not a fragment bit", f)
			case r.Fragment:
				return fmt.Errorf("frag given twice: write frag alone (a fragment other than the first) or frag with bits, as in frag last")
			case f.Set&FragFirst != 0 && f.Set&FragLast != 0:
				return fmt.Errorf("frag first,last never matches: no fragment is both the first and the last (write two rules)")
			case f.Set&(FragFirst|FragLast) != 0 && f.Clear&FragAny != 0:
				return fmt.Errorf("frag %s never matches: a first or last fragment is a fragment", f)
			case (f.Set|f.Clear)&FragDF != 0 && (r.family() == 6 || r.HasProto && r.Proto == ProtoICMPv6):
				return fmt.Errorf("frag %s: IPv6 has no DF bit (RFC 8956's fragment bits are any, first and last): leave df out of a rule for IPv6", f)
			case f.Set&FragLast != 0 && (r.TCPFlags != nil || r.Nums != nil && (r.Nums.Sport.IsSet() || r.Nums.Dport.IsSet() || r.Nums.Type.IsSet() || r.Nums.Code.IsSet())):
				// (port says so itself.)
				return fmt.Errorf("frag %s never matches together with ports, flags, type or code: a last fragment is not the first and carries no L4 header (write frag first, or leave them out)", f)
			}
			return nil
		},
		match: func(r *Rule, pkt *packet) bool { return pkt.isIP && r.FragBits.Matches(pkt.fragBits) },
		direct: &directField{fld: int(gen.FastdropFdFieldFD_FLD_FRAG), off: int(gen.FastdropFdDirectFD_DIR_FRAG), bits: 6,
			spans: func(r *Rule, dst []span) []span {
				return valueSpans(dst, 64, func(v int) bool { return r.FragBits.Matches(uint8(v)) })
			}},
		recFlag: uint32(gen.FastdropFdRecFlagsFD_REC_FRAGBITS),
		rec:     []recMember{{"frag_set", recFragSet, 1}, {"frag_clear", recFragSet + 1, 1}},
		encode:  func(b []byte, r *Rule) { b[recFragSet], b[recFragSet+1] = r.FragBits.Set, r.FragBits.Clear },
		decode:  func(b []byte, r *Rule) { r.FragBits = FragBits{Set: b[recFragSet], Clear: b[recFragSet+1]} },
	}
}
