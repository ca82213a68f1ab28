package fastdrop

import (
	"encoding/binary"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ParseError is an error in a rule file. Error() reads
// "FILE:LINE: MESSAGE", the message saying what is wrong and what is
// expected instead.
type ParseError struct {
	File string // name given to Parse, or the path given to ParseFile
	Line int    // 1-based
	Msg  string
	Err  error // ErrDuplicatePrefix, ErrTooManyRules, ErrCapacity or nil
}

func (e *ParseError) Error() string {
	if e.File == "" {
		return "line " + strconv.Itoa(e.Line) + ": " + e.Msg
	}
	return e.File + ":" + strconv.Itoa(e.Line) + ": " + e.Msg
}

// Unwrap returns the sentinel the error is an instance of, if any.
func (e *ParseError) Unwrap() error { return e.Err }

// ParseFile parses the rule file at path; errors name the path.
func ParseFile(path string) (*RuleSet, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read rules: %w", err)
	}
	defer f.Close()
	var sb strings.Builder
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
		sb.Grow(int(fi.Size()) + 1)
	}
	if _, err := io.Copy(&sb, f); err != nil {
		return nil, fmt.Errorf("read rules: %w", err)
	}
	return parseString(sb.String(), path)
}

// Parse parses a rule file (syntax in docs/RULES.md) read from r. name is
// used in error messages, usually the file name. Errors in the file are
// returned as *ParseError; Parse stops at the first.
func Parse(r io.Reader, name string) (*RuleSet, error) {
	// The whole input is held as one string so that every token is a
	// substring of it: parsing a million prefix lines then allocates
	// nothing per line but the rule itself.
	var sb strings.Builder
	if _, err := io.Copy(&sb, r); err != nil {
		return nil, fmt.Errorf("read rules %s: %w", name, err)
	}
	return parseString(sb.String(), name)
}

// PrefixRules returns one prefix-only rule "action src p" per prefix, in
// order, for building large block or allow lists in code. The prefixes are
// used as given: RuleSet.Validate rejects unmasked, IPv4-mapped or repeated
// ones.
func PrefixRules(action Action, prefixes []netip.Prefix) []Rule {
	rules := make([]Rule, len(prefixes))
	for i, p := range prefixes {
		rules[i] = Rule{Action: action, Src: p}
	}
	return rules
}

const wantAction = "want drop, pass, redirect or limit, or a policy or malformed line"

// clipped is a piece of a rule file quoted in an error message. It prints
// (with %s or %q) at most clipLen bytes of it and then its length, so that
// a line of a megabyte does not come back whole.
type clipped string

const clipLen = 80

func (c clipped) Format(f fmt.State, verb rune) {
	s, more := string(c), ""
	if len(s) > clipLen {
		n := clipLen
		for n > 0 && !utf8.RuneStart(s[n]) {
			n--
		}
		s, more = s[:n], "…("+strconv.Itoa(len(c))+" bytes)"
	}
	if verb == 'q' {
		s = strconv.Quote(s)
	}
	io.WriteString(f, s+more)
}

type parser struct {
	name string
	line int
	toks []string
}

func (p *parser) errorf(format string, args ...any) *ParseError {
	return &ParseError{File: p.name, Line: p.line, Msg: fmt.Sprintf(format, args...)}
}

func parseString(s, name string) (*RuleSet, error) {
	p := &parser{name: name, toks: make([]string, 0, 16)}
	// Size for the common case, a long list of one rule per line.
	lines := strings.Count(s, "\n") + 1
	if lines > MaxRules {
		// Say so before parsing (and holding) more rules than any
		// program can take.
		if e := p.countRules(s); e != nil {
			return nil, e
		}
	}
	rs := &RuleSet{Rules: make([]Rule, 0, min(lines, MaxRules))}
	var keys []uint64 // prefixKey of each prefix-only rule
	policyLine, malformedLine, compound := 0, 0, 0

	for len(s) > 0 {
		var line string
		if i := strings.IndexByte(s, '\n'); i >= 0 {
			line, s = s[:i], s[i+1:]
		} else {
			line, s = s, ""
		}
		p.line++
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		p.toks = splitFields(p.toks[:0], line)
		if len(p.toks) == 0 {
			continue
		}

		switch p.toks[0] {
		case "policy", "malformed":
			kw := p.toks[0]
			if len(p.toks) != 2 {
				return nil, p.errorf("%s takes one verdict (want \"%s pass\" or \"%s drop\")", kw, kw, kw)
			}
			a, err := ParseAction(p.toks[1])
			if err != nil || a == ActionLimit || (kw == "malformed" && a == ActionRedirect) {
				if kw == "malformed" {
					return nil, p.errorf("unknown malformed verdict %q (want pass or drop)", clipped(p.toks[1]))
				}
				return nil, p.errorf("unknown policy %q (want pass or drop; redirect in redirect programs)", clipped(p.toks[1]))
			}
			prev := &policyLine
			if kw == "malformed" {
				prev = &malformedLine
			}
			if *prev != 0 {
				return nil, p.errorf("%s given twice (also on line %d; at most one %s line)", kw, *prev, kw)
			}
			*prev = p.line
			if kw == "policy" {
				rs.Policy = a
			} else {
				rs.Malformed = a
			}
			continue
		}

		// The rule is parsed in place: copying a Rule into the slice
		// while the garbage collector runs costs a write barrier over
		// the whole struct. The slot is still zero, since the capacity
		// (one per line) is never exceeded and slots are never reused.
		n := len(rs.Rules)
		rs.Rules = rs.Rules[:n+1]
		r := &rs.Rules[n]
		if perr := p.rule(r); perr != nil {
			return nil, perr
		}
		if err := r.validate(); err != nil {
			return nil, p.errorf("%s", err.Error())
		}
		if r.IsPrefixOnly() {
			if keys == nil {
				keys = make([]uint64, 0, lines)
			}
			keys = append(keys, prefixKeyOf(r.PrefixKey()))
		} else {
			compound++
			if compound > MaxCompoundRules {
				e := p.errorf("too many compound rules: this is number %d, at most %d are allowed (rules that are only \"ACTION src PREFIX\" or \"ACTION dst PREFIX\" do not count)", compound, MaxCompoundRules)
				e.Err = ErrTooManyRules
				return nil, e
			}
		}
	}
	// Duplicates are checked after the whole file, so a syntax error later
	// in the file is reported before a repeated prefix.
	if dup, prev := checkDuplicatePrefixes(keys, rs.Rules); dup != nil {
		p.line = dup.Line
		k := dup.PrefixKey()
		side := "src"
		if k.Dst {
			side = "dst"
		}
		e := p.errorf("prefix %s already has a rule on line %d (each prefix at most once in \"ACTION %s PREFIX\" rules)", k.Prefix, prev.Line, side)
		e.Err = ErrDuplicatePrefix
		return nil, e
	}
	if policyLine == 0 {
		rs.Policy = ActionPass
	}
	if malformedLine == 0 {
		rs.Malformed = ActionPass
	}
	return rs, nil
}

// countRules reports the line of rule number MaxRules+1 of s, if it has
// that many: the lines that are not blank, a comment, or a policy or
// malformed line, as parseString sees them, without parsing them.
func (p *parser) countRules(s string) *ParseError {
	n := 0
	for line := 1; len(s) > 0; line++ {
		var l string
		if i := strings.IndexByte(s, '\n'); i >= 0 {
			l, s = s[:i], s[i+1:]
		} else {
			l, s = s, ""
		}
		if i := strings.IndexByte(l, '#'); i >= 0 {
			l = l[:i]
		}
		p.toks = splitFields(p.toks[:0], l)
		if len(p.toks) == 0 || p.toks[0] == "policy" || p.toks[0] == "malformed" {
			continue
		}
		if n++; n > MaxRules {
			p.line = line
			e := p.errorf("too many rules: this is rule number %d, and one fast-drop program holds at most %d; %s", n, MaxRules, capacityAdvice)
			e.Err = ErrCapacity
			return e
		}
	}
	return nil
}

// prefixKey returns a 64-bit fingerprint of p: equal prefixes have equal
// keys, and different ones almost never do.
func prefixKey(p netip.Prefix) uint64 {
	b := p.Addr().As16() // IPv4 as IPv4-mapped; a 4in6 prefix is invalid anyway
	hi := binary.BigEndian.Uint64(b[:8])
	lo := binary.BigEndian.Uint64(b[8:])
	if p.Addr().Is4() {
		// Exact for IPv4: 32 address bits and the length.
		return lo<<8 | uint64(p.Bits())
	}
	return mix64(hi^mix64(lo^uint64(p.Bits())<<56)) | 1<<63
}

// prefixKeyOf is prefixKey of a prefix rule's table and prefix: bit 62
// (which no IPv4 key uses) set for the destination table's.
func prefixKeyOf(k PrefixKey) uint64 {
	if k.Dst {
		return prefixKey(k.Prefix) ^ 1<<62
	}
	return prefixKey(k.Prefix)
}

// mix64 is the splitmix64 finalizer.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// checkDuplicatePrefixes reports the first prefix-only rule whose prefix an
// earlier prefix-only rule already has. keys are the prefixKeys of the
// prefix-only rules; they are sorted in place. Radix-sorting a million
// integers is several times faster than filling a map of a million entries
// (and than a comparison sort), so the map is only built when the sort
// finds a candidate pair.
func checkDuplicatePrefixes(keys []uint64, rules []Rule) (dup, prev *Rule) {
	radixSort(keys)
	candidate := false
	for i := 1; i < len(keys); i++ {
		if keys[i] == keys[i-1] {
			candidate = true
			break
		}
	}
	if !candidate {
		return nil, nil
	}
	seen := make(map[PrefixKey]int)
	for i := range rules {
		r := &rules[i]
		if !r.IsPrefixOnly() {
			continue
		}
		k := r.PrefixKey()
		if j, ok := seen[k]; ok {
			return r, &rules[j]
		}
		seen[k] = i
	}
	return nil, nil // a fingerprint collision of different prefixes
}

// radixSort sorts keys in place: least significant digit first, 11 bits
// per pass, skipping passes in which every key has the same digit (IPv4
// keys use only the low 40 bits).
func radixSort(keys []uint64) {
	if len(keys) < 2 {
		return
	}
	const digitBits = 11
	const buckets = 1 << digitBits
	var count [buckets]int
	src, dst := keys, make([]uint64, len(keys))
	for shift := 0; shift < 64; shift += digitBits {
		clear(count[:])
		for _, k := range src {
			count[k>>shift&(buckets-1)]++
		}
		if count[src[0]>>shift&(buckets-1)] == len(src) {
			continue
		}
		sum := 0
		for i, c := range count {
			count[i] = sum
			sum += c
		}
		for _, k := range src {
			d := k >> shift & (buckets - 1)
			dst[count[d]] = k
			count[d]++
		}
		src, dst = dst, src
	}
	if &src[0] != &keys[0] {
		copy(keys, src)
	}
}

// splitFields appends the blank-separated fields of line to dst.
func splitFields(dst []string, line string) []string {
	start := -1
	for i := 0; i < len(line); i++ {
		switch line[i] {
		case ' ', '\t', '\r', '\v', '\f':
			if start >= 0 {
				dst = append(dst, line[start:i])
				start = -1
			}
		default:
			if start < 0 {
				start = i
			}
		}
	}
	if start >= 0 {
		dst = append(dst, line[start:])
	}
	return dst
}

// rule parses p.toks as "ACTION MATCH..." into r, which is zero.
func (p *parser) rule(r *Rule) *ParseError {
	r.Line = p.line
	a, err := ParseAction(p.toks[0])
	if err != nil {
		return p.errorf("unknown action %q (%s)", clipped(p.toks[0]), wantAction)
	}
	r.Action = a

	// The token that gave each field its value, "" if none yet.
	var seen [len(matchFields)]string
	toks := p.toks[1:]
	var limitSeen [3]bool
	if a == ActionLimit {
		if len(toks) == 0 || isKeyword(toks[0]) {
			return p.errorf("limit needs a rate first (%s, as in limit 1000/s udp dport 53)", wantRate)
		}
		rate, unit, err := ParseRate(toks[0])
		if err != nil {
			return p.errorf("%s", err.Error())
		}
		r.Limit = &Limit{Rate: rate, Unit: unit}
		toks = toks[1:]
	}
	for len(toks) > 0 {
		if r.Limit != nil {
			n, msg := parseLimitWord(r.Limit, &limitSeen, toks)
			if msg != "" {
				return p.errorf("%s", msg)
			}
			if n > 0 {
				toks = toks[n:]
				continue
			}
		}
		kw := toks[0]
		toks = toks[1:]
		if kw == sampleKeyword {
			// A modifier, not a match field: it says what else to do
			// with the rule's frames, and comes after the fields.
			if r.Sample != 0 {
				return p.errorf("sample given twice (once per rule)")
			}
			if len(toks) == 0 {
				return p.errorf("%s", sampleNeed)
			}
			n, msg := parseSample(toks[0])
			if msg != "" {
				return p.errorf("%s", msg)
			}
			r.Sample, toks = n, toks[1:]
			if len(toks) > 0 && toks[0] == sampleKeyword {
				return p.errorf("sample given twice (once per rule)")
			}
			if len(toks) > 0 {
				return p.errorf("unexpected %q after sample: the sample modifier comes last", clipped(toks[0]))
			}
			continue
		}
		i := fieldByKeyword(kw)
		if i < 0 {
			if _, err := ParseAction(kw); err == nil {
				return p.errorf("unexpected %q: the action comes first and only once per line", kw)
			}
			return p.errorf("unknown field %q (%s)", clipped(kw), wantFieldsText())
		}
		f, prev := &matchFields[i], &seen[i]
		if *prev != "" && f.twice == nil {
			return p.errorf("%s given twice (each field at most once per rule; write two rules to match either)", f.name)
		}
		// A field's value is the next token, or the alias used as the
		// keyword ("tcp"). A keyword as the next token means the value
		// was left out; but a field's aliases are also its values
		// ("proto tcp").
		v := kw
		if !f.flag && kw == f.name {
			if len(toks) == 0 || isKeyword(toks[0]) && !f.isAlias(toks[0]) {
				return p.errorf("%s", f.need)
			}
			v, toks = toks[0], toks[1:]
		} else if f.flag && f.optional != nil && len(toks) > 0 && f.optional(toks[0]) {
			v, toks = toks[0], toks[1:]
		}
		if *prev != "" {
			return p.errorf("%s", f.twice(*prev, v))
		}
		*prev = v
		if msg := f.parse(r, v); msg != "" {
			return p.errorf("%s", msg)
		}
	}
	if r.Limit != nil {
		if r.Limit.Burst > 1<<32-1 {
			return p.errorf("limit burst above 4294967295: write a smaller burst")
		}
		if msg := r.Limit.resolveSrcLen(r.family()); msg != "" {
			return p.errorf("%s", msg)
		}
	}
	return nil
}

func isKeyword(s string) bool { return fieldByKeyword(s) >= 0 || s == sampleKeyword }

// The sample modifier: "sample 1/N".
const (
	sampleKeyword = "sample"
	sampleNeed    = "sample needs a rate: 1/N, e.g. sample 1/1000 (1 in N of the rule's frames)"
	// MaxSample is the largest N of "sample 1/N".
	MaxSample = 1 << 30
)

// parseSample parses the value of the sample modifier, "1/N".
func parseSample(v string) (uint32, string) {
	one, n, ok := strings.Cut(v, "/")
	if !ok || one != "1" {
		return 0, fmt.Sprintf("sample %q: %s", clipped(v), sampleNeed[len("sample needs "):])
	}
	x, ok := parseUint(n, 10)
	if !ok || x < 1 || x > MaxSample {
		return 0, fmt.Sprintf("sample %q: N in 1/N must be a whole number from 1 to %d", clipped(v), MaxSample)
	}
	return uint32(x), ""
}

// ParsePrefix parses "ADDR/LEN" or "ADDR" (a host route) as a rule file's
// src and dst are parsed, and refuses what a rule file refuses (host bits
// after the length, an IPv4-mapped prefix, a zone) with the same message.
// field names the value in the message, e.g. "--deny" for a command-line
// flag: `--deny 192.0.2.77/24 has bits set after the prefix length; write
// 192.0.2.0/24 (or 192.0.2.77/32 for the single address)`.
func ParsePrefix(field, s string) (netip.Prefix, error) {
	p, msg := parsePrefix(s)
	if msg != "" {
		return netip.Prefix{}, fmt.Errorf("%s %s: %s", field, clipped(s), msg)
	}
	if err := validatePrefix(field, p); err != nil {
		return netip.Prefix{}, err
	}
	return p, nil
}

// parsePrefix parses "ADDR/LEN" or "ADDR" (a host route). It returns the
// prefix unmasked; Rule.Validate reports host bits with a suggestion.
func parsePrefix(s string) (netip.Prefix, string) {
	as, bs, hasLen := strings.Cut(s, "/")
	a, err := netip.ParseAddr(as)
	if err != nil {
		return netip.Prefix{}, fmt.Sprintf("%q is not an IPv4 or IPv6 address (want e.g. 192.0.2.0/24, 2001:db8::/32 or 192.0.2.1)", clipped(as))
	}
	if a.Zone() != "" {
		return netip.Prefix{}, fmt.Sprintf("an address with a zone (%%%s) cannot be matched; remove the zone", clipped(a.Zone()))
	}
	if !hasLen {
		return netip.PrefixFrom(a, a.BitLen()), ""
	}
	bits, ok := parseUint(bs, 3)
	if !ok || bits > a.BitLen() {
		return netip.Prefix{}, fmt.Sprintf("prefix length %q out of range (want 0-%d)", clipped(bs), a.BitLen())
	}
	return netip.PrefixFrom(a, bits), ""
}

// parseUint parses 1 to maxDigits decimal digits.
func parseUint(s string, maxDigits int) (int, bool) {
	if len(s) == 0 || len(s) > maxDigits {
		return 0, false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

func parseProto(s string) (uint8, bool) {
	switch s {
	case "tcp":
		return ProtoTCP, true
	case "udp":
		return ProtoUDP, true
	case "icmp":
		return ProtoICMP, true
	case "icmpv6":
		return ProtoICMPv6, true
	}
	n, ok := parseUint(s, 3)
	if !ok || n > 255 {
		return 0, false
	}
	return uint8(n), true
}

func parseEtherType(s string) (uint16, string) {
	switch s {
	case "arp":
		return EtherTypeARP, ""
	case "lldp":
		return EtherTypeLLDP, ""
	case "ipv4":
		return EtherTypeIPv4, ""
	case "ipv6":
		return EtherTypeIPv6, ""
	case "vlan":
		return 0, "never matches: VLAN tags are skipped and ether matches the EtherType after them"
	}
	const want = "want arp, lldp, ipv4, ipv6 or a hex EtherType like 0x88cc"
	if len(s) < 3 || len(s) > 6 || s[0] != '0' || (s[1] != 'x' && s[1] != 'X') {
		return 0, "unknown EtherType (" + want + ")"
	}
	n, err := strconv.ParseUint(s[2:], 16, 16)
	if err != nil {
		return 0, "unknown EtherType (" + want + ")"
	}
	if n == 0 {
		return 0, "0 is not an EtherType (" + want + ")"
	}
	return uint16(n), ""
}
