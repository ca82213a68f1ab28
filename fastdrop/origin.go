package fastdrop

import (
	"bytes"
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Origins: every rule remembers where it came from (Rule.Origin), so that
// several sources share one program on an interface and each changes only
// its own rules (Engine.ApplyOrigin; Add, Delete and Replace match the
// origin too). The origin is kept in the rule's record, so a later
// process (xdpdrop rules list) sees it.
//
// The compound rules of different origins are evaluated in origin order:
// the default origin's (the drop command's) first, then every other
// origin's in name order, then the late origins' (OriginRedirect, and any
// name that starts with "redirect:"), each origin's rules in their own
// order. A late origin's compound rules come after the prefix rules too:
// a frame they match that a prefix rule matches as well takes the prefix
// rule's action. So nothing a drop rule (compound or prefix) matches is
// handed to an AF_XDP socket. Prefix rules are one table for all origins
// (longest prefix wins), so two origins cannot hold the same prefix.
//
// There is one policy and one malformed verdict per program: ApplyOrigin
// sets them only when its rule set names them.

// OriginRedirect is the origin of the rules of xdpdrop redirect.
const OriginRedirect = "redirect"

// MaxOriginLen is the longest origin name a rule record holds.
const MaxOriginLen = originLen

// ValidateOrigin reports whether name can be a rule's origin: at most
// MaxOriginLen bytes of lower-case letters, digits and "-_.:/", or "".
func ValidateOrigin(name string) error {
	if len(name) > MaxOriginLen {
		return fmt.Errorf("origin %q is longer than %d bytes", clipped(name), MaxOriginLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || strings.IndexByte("-_.:/", c) >= 0) {
			return fmt.Errorf("origin %q: want lower-case letters, digits and -_.:/ only", clipped(name))
		}
	}
	return nil
}

// OriginName is how an origin is shown: "drop" for the default origin.
func OriginName(origin string) string {
	if origin == "" {
		return "drop"
	}
	return origin
}

// isLateOrigin reports whether origin's compound rules come after the
// prefix rules.
func isLateOrigin(origin string) bool {
	return origin == OriginRedirect || strings.HasPrefix(origin, OriginRedirect+":")
}

// originRank orders origins: the default first, then the others, then
// the late ones.
func originRank(origin string) int {
	switch {
	case origin == "":
		return 0
	case isLateOrigin(origin):
		return 2
	}
	return 1
}

// compareOrigins orders two origins as their rules are evaluated.
func compareOrigins(a, b string) int {
	if c := cmp.Compare(originRank(a), originRank(b)); c != 0 {
		return c
	}
	return strings.Compare(a, b)
}

// compoundOrder returns the indices of the compound rules of rules in the
// order they are evaluated (by origin, then as they come in rules), and
// how many of them are not late. With one origin that is rules' order.
func compoundOrder(rules []Rule) (order []int, early int) {
	mixed := false
	for i := range rules {
		if !rules[i].IsPrefixOnly() {
			if len(order) > 0 && rules[i].Origin != rules[order[0]].Origin {
				mixed = true
			}
			order = append(order, i)
		}
	}
	if mixed {
		slices.SortStableFunc(order, func(a, b int) int { return compareOrigins(rules[a].Origin, rules[b].Origin) })
	}
	early = len(order)
	for k, i := range order {
		if isLateOrigin(rules[i].Origin) {
			early = k
			break
		}
	}
	return order, early
}

// internOrigin returns the origin a record holds (NUL-padded), without a
// new string for the common names.
func internOrigin(b []byte) string {
	if n := bytes.IndexByte(b, 0); n >= 0 {
		b = b[:n]
	}
	if string(b) == OriginRedirect {
		return OriginRedirect
	}
	return string(b)
}
