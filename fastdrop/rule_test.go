package fastdrop

import (
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

func TestAction(t *testing.T) {
	for _, a := range []Action{ActionDrop, ActionPass, ActionRedirect} {
		got, err := ParseAction(a.String())
		if err != nil || got != a {
			t.Errorf("ParseAction(%q) = %v, %v", a.String(), got, err)
		}
	}
	if s := Action(0).String(); s != "Action(0)" {
		t.Errorf("Action(0).String() = %q", s)
	}
	if _, err := ParseAction("accept"); err == nil || err.Error() != `unknown action "accept" (want drop, pass, redirect or limit)` {
		t.Errorf("ParseAction(accept) error = %v", err)
	}
}

func TestRuleValidateInCode(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    Rule
		want string // "" = valid
	}{
		{"zero action", Rule{}, "invalid action 0 (want drop, pass, redirect or limit)"},
		{"limit without a rate", Rule{Action: 4}, "limit needs a rate (want e.g. limit 1000/s udp dport 53)"},
		{"action 5", Rule{Action: 5}, "invalid action 5 (want drop, pass, redirect or limit)"},
		{"match all", Rule{Action: ActionDrop}, ""},
		{"proto without HasProto", Rule{Action: ActionDrop, Proto: 6}, "rule sets protocol 6 but its protocol match is off"},
		{"proto 0", Rule{Action: ActionDrop, HasProto: true}, ""},
		{"invalid prefix", Rule{Action: ActionDrop, Src: netip.PrefixFrom(netip.MustParseAddr("10.0.0.0"), 40)}, "src invalid Prefix is not a valid prefix"},
		{"prefix without address", Rule{Action: ActionDrop, Dst: netip.PrefixFrom(netip.Addr{}, 0)}, ""},
		{"unmasked", Rule{Action: ActionDrop, Src: netip.MustParsePrefix("10.1.2.3/8")}, "src 10.1.2.3/8 has bits set after the prefix length; write 10.0.0.0/8 (or 10.1.2.3/32 for the single address)"},
		{"4in6", Rule{Action: ActionDrop, Src: netip.MustParsePrefix("::ffff:192.0.2.0/120")}, "src ::ffff:192.0.2.0/120 is an IPv4-mapped IPv6 prefix, which never matches; write the IPv4 prefix 192.0.2.0/24"},
		{"4in6 short", Rule{Action: ActionDrop, Src: netip.MustParsePrefix("::/64")}, ""},
		{"empty port range", Rule{Action: ActionDrop, HasProto: true, Proto: 17, Nums: &Nums{Dport: NumRange(9, 8)}}, "dport 9-8: range is empty (write the lower value first)"},
		{"ports without proto", Rule{Action: ActionDrop, Nums: &Nums{Sport: NumRange(1, 1)}}, `sport needs protocol tcp or udp (write e.g. "udp sport 1")`},
		{"tcp ports", Rule{Action: ActionDrop, HasProto: true, Proto: 6, Nums: &Nums{Sport: NumRange(1, 2), Dport: NumRange(3, 3)}}, ""},
		{"frag with sport", Rule{Action: ActionDrop, HasProto: true, Proto: 6, Nums: &Nums{Sport: NumRange(1, 2)}, Fragment: true}, "frag never matches together with sport: non-first fragments carry no L4 header"},
		{"ether ipv6 with v4 dst", Rule{Action: ActionDrop, EtherType: EtherTypeIPv6, Dst: netip.MustParsePrefix("10.0.0.0/8")}, "ether ipv6 never matches an IPv4 prefix"},
		{"ether qinq", Rule{Action: ActionDrop, EtherType: EtherTypeQinQ}, "ether 0x88a8 never matches: VLAN tags are skipped and ether matches the EtherType after them"},
		{"ether arp frag", Rule{Action: ActionDrop, EtherType: EtherTypeARP, Fragment: true}, "ether arp never matches a rule with src, dst, proto, sport, dport, frag, ttl, flags, dscp, type, code, len, port or flowlabel: those need an IPv4 or IPv6 frame"},
		{"redirect", Rule{Action: ActionRedirect, HasProto: true, Proto: 17, Nums: &Nums{Dport: NumRange(53, 53)}}, ""},
		{"proto 51 v4", Rule{Action: ActionDrop, HasProto: true, Proto: 51, Src: netip.MustParsePrefix("10.0.0.0/8")}, ""},
		{"proto 51 v6", Rule{Action: ActionDrop, HasProto: true, Proto: 51, Src: netip.MustParsePrefix("2001:db8::/32")}, `proto 51 matches IPv6 frames only in non-first fragments (extension headers are skipped and proto is the protocol after them; in a non-first fragment it is the fragment header's next header): add frag, as in "drop proto 51 src 2001:db8::/32 frag"`},
		{"proto 60 v6 frag", Rule{Action: ActionDrop, HasProto: true, Proto: 60, Src: netip.MustParsePrefix("2001:db8::/32"), Fragment: true}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.r.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Validate(%#v) = %v, want nil", tc.r, err)
			case tc.want != "" && (err == nil || err.Error() != tc.want):
				t.Errorf("Validate(%#v) = %v, want %s", tc.r, err, tc.want)
			}
		})
	}
}

func TestIsPrefixOnly(t *testing.T) {
	src := netip.MustParsePrefix("192.0.2.0/24")
	pr := NumRange(1, 1)
	for _, tc := range []struct {
		r    Rule
		want bool
	}{
		{Rule{Action: ActionDrop, Src: src}, true},
		{Rule{Action: ActionPass, Src: src, Line: 9}, true},
		{Rule{Action: ActionDrop}, false},
		{Rule{Action: ActionDrop, Dst: src}, true},
		{Rule{Action: ActionDrop, Dst: src, Sample: 10}, true},
		{Rule{Action: ActionDrop, Dst: src, HasProto: true, Proto: 6}, false},
		{Rule{Action: ActionDrop, Dst: src, EtherType: EtherTypeIPv4}, false},
		{Rule{Action: ActionDrop, Src: src, Dst: src}, false},
		{Rule{Action: ActionDrop, Src: src, HasProto: true}, false},
		{Rule{Action: ActionDrop, Src: src, HasProto: true, Proto: 17, Nums: &Nums{Dport: pr}}, false},
		{Rule{Action: ActionDrop, Src: src, HasProto: true, Proto: 17, Nums: &Nums{Sport: pr}}, false},
		{Rule{Action: ActionDrop, Src: src, EtherType: EtherTypeIPv4}, false},
		{Rule{Action: ActionDrop, Src: src, Fragment: true}, false},
	} {
		if got := tc.r.IsPrefixOnly(); got != tc.want {
			t.Errorf("%v IsPrefixOnly() = %v, want %v", tc.r, got, tc.want)
		}
	}
}

func TestRuleSetValidate(t *testing.T) {
	udp := Rule{Action: ActionDrop, HasProto: true, Proto: 17}
	a := Rule{Action: ActionDrop, Src: netip.MustParsePrefix("10.0.0.0/8")}
	for _, tc := range []struct {
		name string
		rs   RuleSet
		want string
		is   error
	}{
		{"empty", RuleSet{}, "", nil},
		{"policies", RuleSet{Policy: ActionRedirect, Malformed: ActionDrop}, "", nil},
		{"bad policy", RuleSet{Policy: 9}, "invalid policy Action(9) (want pass, drop or redirect)", nil},
		{"bad malformed", RuleSet{Malformed: ActionRedirect}, "invalid malformed verdict redirect (want pass or drop)", nil},
		{"bad rule", RuleSet{Rules: []Rule{a, {Action: ActionDrop, Proto: 1, Line: 7}}}, "rule 1 (line 7): rule sets protocol 1 but its protocol match is off", nil},
		{"duplicate", RuleSet{Rules: []Rule{a, udp, a}}, "rule 2 (drop src 10.0.0.0/8): duplicate prefix rule: 10.0.0.0/8 is also rule 0 (drop src 10.0.0.0/8)", ErrDuplicatePrefix},
		{"too many", RuleSet{Rules: func() []Rule {
			rs := []Rule{a}
			for range MaxCompoundRules + 1 {
				rs = append(rs, udp)
			}
			return rs
		}()}, "rule 257 (drop udp): too many compound rules: more than 256", ErrTooManyRules},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.rs.Validate()
			if tc.want == "" {
				if err != nil {
					t.Errorf("Validate() = %v", err)
				}
				return
			}
			if err == nil || err.Error() != tc.want {
				t.Errorf("Validate() = %v, want %s", err, tc.want)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("Validate() = %v, want errors.Is %v", err, tc.is)
			}
		})
	}
	rs := RuleSet{}
	if rs.EffectivePolicy() != ActionPass || rs.EffectiveMalformed() != ActionPass {
		t.Error("zero Policy/Malformed are not ActionPass")
	}
}

func TestRuleStringOfCodeRules(t *testing.T) {
	// Every rule that validates prints as text that parses back to it.
	var rules []Rule
	for _, src := range []netip.Prefix{{}, netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8::/33")} {
		for _, proto := range []int{-1, 0, 1, 6, 17, 58, 132} {
			for _, ports := range []*Nums{nil, {Sport: NumRange(5, 5)}, {Sport: NumRange(0, 65535)}} {
				for _, ether := range []uint16{0, EtherTypeIPv4, EtherTypeIPv6, EtherTypeARP, 0x1234} {
					for _, frag := range []bool{false, true} {
						r := Rule{Action: ActionDrop, Src: src, Dst: src, Nums: ports, EtherType: ether, Fragment: frag}
						if proto >= 0 {
							r.HasProto, r.Proto = true, uint8(proto)
						}
						if r.Validate() == nil {
							rules = append(rules, r)
						}
					}
				}
			}
		}
	}
	if len(rules) < 50 {
		t.Fatalf("only %d valid rules", len(rules))
	}
	for _, r := range rules {
		rs, err := Parse(strings.NewReader(r.String()), "")
		if err != nil {
			t.Errorf("%v: %v", r, err)
			continue
		}
		got := rs.Rules[0]
		got.Line = 0
		if !reflect.DeepEqual(got, r) {
			t.Errorf("%v reparsed as %v", r, got)
		}
	}
}
