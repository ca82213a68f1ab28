package agent

import (
	"sort"
	"strconv"
	"strings"
)

// ivals is a set of values of a numeric FlowSpec component as sorted,
// disjoint, non-adjacent closed intervals. A component's operator list
// becomes one exactly, whatever its comparisons, ANDs and ORs, and is
// written back as a value list ("53,123,1024-65535"): the same set of
// packets, never wider or narrower.
type ivals []ival

type ival struct{ lo, hi uint64 }

// full is the whole domain 0..max.
func full(max uint64) ivals { return ivals{{0, max}} }

// termSet is the set {x in 0..max : x OP v} of one numeric_op term (its
// lt, gt and eq bits, RFC 8955 section 4.2.1.1).
func termSet(lt, gt, eq bool, v, max uint64) ivals {
	var s ivals
	add := func(lo, hi uint64) {
		if lo <= hi && lo <= max {
			s = append(s, ival{lo, min(hi, max)})
		}
	}
	if lt && v > 0 {
		add(0, v-1)
	}
	if eq {
		add(v, v)
	}
	if gt && v < ^uint64(0) {
		add(v+1, max)
	}
	return s.norm()
}

// norm sorts and merges s.
func (s ivals) norm() ivals {
	if len(s) < 2 {
		return s
	}
	sort.Slice(s, func(i, j int) bool { return s[i].lo < s[j].lo })
	out := s[:1]
	for _, v := range s[1:] {
		last := &out[len(out)-1]
		if v.lo <= last.hi || v.lo == last.hi+1 {
			last.hi = max(last.hi, v.hi)
			continue
		}
		out = append(out, v)
	}
	return out
}

func (s ivals) union(t ivals) ivals {
	return append(append(ivals{}, s...), t...).norm()
}

func (s ivals) intersect(t ivals) ivals {
	var out ivals
	for i, j := 0, 0; i < len(s) && j < len(t); {
		lo, hi := max(s[i].lo, t[j].lo), min(s[i].hi, t[j].hi)
		if lo <= hi {
			out = append(out, ival{lo, hi})
		}
		if s[i].hi < t[j].hi {
			i++
		} else {
			j++
		}
	}
	return out
}

// isFull reports whether s is all of 0..max.
func (s ivals) isFull(max uint64) bool { return len(s) == 1 && s[0].lo == 0 && s[0].hi == max }

// count is the number of values in s (saturating).
func (s ivals) count() uint64 {
	var n uint64
	for _, v := range s {
		n += v.hi - v.lo + 1
	}
	return n
}

// text writes one interval as the rule language does: "53" or "0-1023";
// hex for flow labels.
func (v ival) text(hex bool) string {
	f := func(x uint64) string {
		if hex {
			return "0x" + strconv.FormatUint(x, 16)
		}
		return strconv.FormatUint(x, 10)
	}
	if v.lo == v.hi {
		return f(v.lo)
	}
	return f(v.lo) + "-" + f(v.hi)
}

// list writes s as a value list: "53,123,1024-65535".
func (s ivals) list(hex bool) string {
	parts := make([]string, len(s))
	for i, v := range s {
		parts[i] = v.text(hex)
	}
	return strings.Join(parts, ",")
}

// complement is the values of 0..max that s does not hold.
func (s ivals) complement(max uint64) ivals {
	var out ivals
	next := uint64(0)
	for _, v := range s {
		if v.lo > next {
			out = append(out, ival{next, v.lo - 1})
		}
		if v.hi >= max {
			return out
		}
		next = v.hi + 1
	}
	return append(out, ival{next, max})
}

// listOrNot writes s as a value list, or as the negated list of the
// values it does not hold ("!22" for 0-21,23-65535) when that is shorter:
// the same set when the rule language's field has the domain 0..max.
func (s ivals) listOrNot(max uint64, hex bool) string {
	if c := s.complement(max); len(c) > 0 && len(c) < len(s) {
		return "!" + c.list(hex)
	}
	return s.list(hex)
}
