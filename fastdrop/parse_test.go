package fastdrop

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }

func dports(lo, hi uint32) *Nums { return &Nums{Dport: NumRange(lo, hi)} }
func sports(lo, hi uint32) *Nums { return &Nums{Sport: NumRange(lo, hi)} }

// parseOne parses a single rule line.
func parseOne(t *testing.T, line string) Rule {
	t.Helper()
	rs, err := Parse(strings.NewReader(line), "rules.txt")
	if err != nil {
		t.Fatalf("Parse(%q): %v", line, err)
	}
	if len(rs.Rules) != 1 {
		t.Fatalf("Parse(%q): %d rules, want 1", line, len(rs.Rules))
	}
	return rs.Rules[0]
}

func TestParseRule(t *testing.T) {
	for _, tc := range []struct {
		line   string
		want   Rule // Line is set to 1 by the test
		canon  string
		prefix bool
	}{
		{"drop src 192.0.2.0/24", Rule{Action: ActionDrop, Src: pfx("192.0.2.0/24")}, "drop src 192.0.2.0/24", true},
		{"drop src 192.0.2.1", Rule{Action: ActionDrop, Src: pfx("192.0.2.1/32")}, "drop src 192.0.2.1/32", true},
		{"pass src 0.0.0.0/0", Rule{Action: ActionPass, Src: pfx("0.0.0.0/0")}, "pass src 0.0.0.0/0", true},
		{"drop src 2001:db8::/32", Rule{Action: ActionDrop, Src: pfx("2001:db8::/32")}, "drop src 2001:db8::/32", true},
		{"drop src 2001:DB8::1", Rule{Action: ActionDrop, Src: pfx("2001:db8::1/128")}, "drop src 2001:db8::1/128", true},
		{"redirect src ::/0", Rule{Action: ActionRedirect, Src: pfx("::/0")}, "redirect src ::/0", true},
		{"pass dst 198.51.100.0/24", Rule{Action: ActionPass, Dst: pfx("198.51.100.0/24")}, "pass dst 198.51.100.0/24", true},
		{"drop dst 2001:db8::7", Rule{Action: ActionDrop, Dst: pfx("2001:db8::7/128")}, "drop dst 2001:db8::7/128", true},
		{"drop src 10.0.0.0/8 dst 10.0.0.0/8", Rule{Action: ActionDrop, Src: pfx("10.0.0.0/8"), Dst: pfx("10.0.0.0/8")}, "drop src 10.0.0.0/8 dst 10.0.0.0/8", false},
		{"drop proto tcp", Rule{Action: ActionDrop, Proto: 6, HasProto: true}, "drop tcp", false},
		{"drop proto udp", Rule{Action: ActionDrop, Proto: 17, HasProto: true}, "drop udp", false},
		{"drop proto icmp", Rule{Action: ActionDrop, Proto: 1, HasProto: true}, "drop icmp", false},
		{"drop proto icmpv6", Rule{Action: ActionDrop, Proto: 58, HasProto: true}, "drop icmpv6", false},
		{"drop proto 47", Rule{Action: ActionDrop, Proto: 47, HasProto: true}, "drop proto 47", false},
		{"drop proto 0", Rule{Action: ActionDrop, Proto: 0, HasProto: true}, "drop proto 0", false},
		{"drop proto 255", Rule{Action: ActionDrop, Proto: 255, HasProto: true}, "drop proto 255", false},
		{"drop proto 17", Rule{Action: ActionDrop, Proto: 17, HasProto: true}, "drop udp", false},
		{"drop tcp", Rule{Action: ActionDrop, Proto: 6, HasProto: true}, "drop tcp", false},
		{"drop udp", Rule{Action: ActionDrop, Proto: 17, HasProto: true}, "drop udp", false},
		{"drop icmp", Rule{Action: ActionDrop, Proto: 1, HasProto: true}, "drop icmp", false},
		{"drop icmpv6", Rule{Action: ActionDrop, Proto: 58, HasProto: true}, "drop icmpv6", false},
		{"drop udp dport 11211", Rule{Action: ActionDrop, Proto: 17, HasProto: true, Nums: dports(11211, 11211)}, "drop udp dport 11211", false},
		{"drop tcp sport 1000-2000", Rule{Action: ActionDrop, Proto: 6, HasProto: true, Nums: sports(1000, 2000)}, "drop tcp sport 1000-2000", false},
		{"drop udp dport 0", Rule{Action: ActionDrop, Proto: 17, HasProto: true, Nums: dports(0, 0)}, "drop udp dport 0", false},
		{"drop udp dport 0-65535", Rule{Action: ActionDrop, Proto: 17, HasProto: true, Nums: dports(0, 65535)}, "drop udp dport 0-65535", false},
		{"drop tcp dport 80-80", Rule{Action: ActionDrop, Proto: 6, HasProto: true, Nums: dports(80, 80)}, "drop tcp dport 80", false},
		{"drop ether arp", Rule{Action: ActionDrop, EtherType: 0x0806}, "drop ether arp", false},
		{"drop ether lldp", Rule{Action: ActionDrop, EtherType: 0x88cc}, "drop ether lldp", false},
		{"drop ether ipv4", Rule{Action: ActionDrop, EtherType: 0x0800}, "drop ether ipv4", false},
		{"drop ether ipv6", Rule{Action: ActionDrop, EtherType: 0x86dd}, "drop ether ipv6", false},
		{"drop ether 0x88CC", Rule{Action: ActionDrop, EtherType: 0x88cc}, "drop ether lldp", false},
		{"drop ether 0X88e5", Rule{Action: ActionDrop, EtherType: 0x88e5}, "drop ether 0x88e5", false},
		{"drop ether 0x1", Rule{Action: ActionDrop, EtherType: 1}, "drop ether 0x0001", false},
		{"drop frag", Rule{Action: ActionDrop, Fragment: true}, "drop frag", false},
		{"drop frag udp", Rule{Action: ActionDrop, Fragment: true, Proto: 17, HasProto: true}, "drop udp frag", false},
		{"drop frag src 10.0.0.0/8", Rule{Action: ActionDrop, Fragment: true, Src: pfx("10.0.0.0/8")}, "drop src 10.0.0.0/8 frag", false},
		{"drop", Rule{Action: ActionDrop}, "drop", false},
		{"pass", Rule{Action: ActionPass}, "pass", false},
		{"redirect udp dport 53", Rule{Action: ActionRedirect, Proto: 17, HasProto: true, Nums: dports(53, 53)}, "redirect udp dport 53", false},
		{"drop dport 53 udp dst 10.0.0.0/8", Rule{Action: ActionDrop, Proto: 17, HasProto: true, Dst: pfx("10.0.0.0/8"), Nums: dports(53, 53)}, "drop udp dst 10.0.0.0/8 dport 53", false},
		{"drop ether ipv4 udp src 10.0.0.0/8 sport 53 dst 192.0.2.0/24 dport 1-1024",
			Rule{Action: ActionDrop, EtherType: 0x0800, Proto: 17, HasProto: true, Src: pfx("10.0.0.0/8"), Nums: &Nums{Sport: NumRange(53, 53), Dport: NumRange(1, 1024)}, Dst: pfx("192.0.2.0/24")},
			"drop ether ipv4 udp src 10.0.0.0/8 sport 53 dst 192.0.2.0/24 dport 1-1024", false},
		{"drop ether ipv6 icmpv6 src 2001:db8::/32", Rule{Action: ActionDrop, EtherType: 0x86dd, Proto: 58, HasProto: true, Src: pfx("2001:db8::/32")}, "drop ether ipv6 icmpv6 src 2001:db8::/32", false},
		{"drop ether ipv4 src 10.0.0.0/8", Rule{Action: ActionDrop, EtherType: 0x0800, Src: pfx("10.0.0.0/8")}, "drop ether ipv4 src 10.0.0.0/8", false},
		{"drop proto 44 src 10.0.0.0/8", Rule{Action: ActionDrop, Proto: 44, HasProto: true, Src: pfx("10.0.0.0/8")}, "drop proto 44 src 10.0.0.0/8", false},
		{"drop frag proto 60 src 2001:db8::/32", Rule{Action: ActionDrop, Proto: 60, HasProto: true, Src: pfx("2001:db8::/32"), Fragment: true}, "drop proto 60 src 2001:db8::/32 frag", false},
		{"drop src 10.0.0.0/8 # comment", Rule{Action: ActionDrop, Src: pfx("10.0.0.0/8")}, "drop src 10.0.0.0/8", true},
		{"drop src 10.0.0.0/8#comment", Rule{Action: ActionDrop, Src: pfx("10.0.0.0/8")}, "drop src 10.0.0.0/8", true},
		{"\t drop\tsrc  10.0.0.0/8 \r", Rule{Action: ActionDrop, Src: pfx("10.0.0.0/8")}, "drop src 10.0.0.0/8", true},
	} {
		t.Run(tc.line, func(t *testing.T) {
			got := parseOne(t, tc.line)
			tc.want.Line = 1
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %#v\nwant %#v", got, tc.want)
			}
			if s := got.String(); s != tc.canon {
				t.Errorf("String() = %q, want %q", s, tc.canon)
			}
			if got.IsPrefixOnly() != tc.prefix {
				t.Errorf("IsPrefixOnly() = %v, want %v", got.IsPrefixOnly(), tc.prefix)
			}
			// The canonical text parses back to the same rule.
			again := parseOne(t, got.String())
			if !reflect.DeepEqual(again, got) {
				t.Errorf("round trip of %q: got %#v, want %#v", got.String(), again, got)
			}
		})
	}
}

func TestParseFile(t *testing.T) {
	const text = `# blocklist under attack
policy pass
malformed drop

drop udp dport 11211      # memcached reflection
drop src 192.0.2.0/24
drop src 2001:db8::/32
pass src 192.0.2.128/25   # exception
`
	path := filepath.Join(t.TempDir(), "rules.txt")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	rs, err := ParseFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := &RuleSet{
		Policy:    ActionPass,
		Malformed: ActionDrop,
		Rules: []Rule{
			{Action: ActionDrop, Proto: 17, HasProto: true, Nums: dports(11211, 11211), Line: 5},
			{Action: ActionDrop, Src: pfx("192.0.2.0/24"), Line: 6},
			{Action: ActionDrop, Src: pfx("2001:db8::/32"), Line: 7},
			{Action: ActionPass, Src: pfx("192.0.2.128/25"), Line: 8},
		},
	}
	if !reflect.DeepEqual(rs, want) {
		t.Errorf("got %+v\nwant %+v", rs, want)
	}
	if err := rs.Validate(); err != nil {
		t.Errorf("Validate of a parsed rule set: %v", err)
	}

	// Errors name the path.
	bad := filepath.Join(t.TempDir(), "bad.rules")
	if err := os.WriteFile(bad, []byte("drop src 10.0.0.0/8\ndrop sport 80\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = ParseFile(bad)
	if want := bad + `:2: sport needs protocol tcp or udp (write e.g. "udp sport 80")`; err == nil || err.Error() != want {
		t.Errorf("ParseFile(bad) = %v, want %s", err, want)
	}

	_, err = ParseFile(filepath.Join(t.TempDir(), "missing"))
	if !errors.Is(err, os.ErrNotExist) || !strings.HasPrefix(err.Error(), "read rules: open ") {
		t.Errorf("ParseFile(missing) = %v, want a wrapped os.ErrNotExist", err)
	}
}

func TestParseDefaultsAndPolicy(t *testing.T) {
	for _, tc := range []struct {
		text              string
		policy, malformed Action
		rules             int
	}{
		{"", ActionPass, ActionPass, 0},
		{"# only a comment\n\n   \n", ActionPass, ActionPass, 0},
		{"policy drop", ActionDrop, ActionPass, 0},
		{"policy pass\n", ActionPass, ActionPass, 0},
		{"policy redirect\nredirect udp dport 53", ActionRedirect, ActionPass, 1},
		{"malformed drop", ActionPass, ActionDrop, 0},
		{"malformed pass # explicit", ActionPass, ActionPass, 0},
		{"drop src 10.0.0.0/8\npolicy drop\nmalformed drop\npass src 10.1.0.0/16", ActionDrop, ActionDrop, 2},
		{"drop src 10.0.0.0/8\r\npolicy drop\r\n", ActionDrop, ActionPass, 1},
	} {
		rs, err := Parse(strings.NewReader(tc.text), "rules.txt")
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.text, err)
			continue
		}
		if rs.Policy != tc.policy || rs.Malformed != tc.malformed || len(rs.Rules) != tc.rules {
			t.Errorf("Parse(%q) = policy %v malformed %v %d rules, want %v %v %d", tc.text, rs.Policy, rs.Malformed, len(rs.Rules), tc.policy, tc.malformed, tc.rules)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		text string
		want string // the whole Error()
	}{
		// Actions and policy lines.
		{"dorp src 10.0.0.0/8", `rules.txt:1: unknown action "dorp" (want drop, pass, redirect or limit, or a policy or malformed line)`},
		{"Drop src 10.0.0.0/8", `rules.txt:1: unknown action "Drop" (want drop, pass, redirect or limit, or a policy or malformed line)`},
		{"src 10.0.0.0/8", `rules.txt:1: unknown action "src" (want drop, pass, redirect or limit, or a policy or malformed line)`},
		{"drop pass", `rules.txt:1: unexpected "pass": the action comes first and only once per line`},
		{"policy", `rules.txt:1: policy takes one verdict (want "policy pass" or "policy drop")`},
		{"policy pass drop", `rules.txt:1: policy takes one verdict (want "policy pass" or "policy drop")`},
		{"policy deny", `rules.txt:1: unknown policy "deny" (want pass or drop; redirect in redirect programs)`},
		{"policy drop\n\npolicy pass", `rules.txt:3: policy given twice (also on line 1; at most one policy line)`},
		{"malformed", `rules.txt:1: malformed takes one verdict (want "malformed pass" or "malformed drop")`},
		{"malformed redirect", `rules.txt:1: unknown malformed verdict "redirect" (want pass or drop)`},
		{"malformed drop\nmalformed drop", `rules.txt:2: malformed given twice (also on line 1; at most one malformed line)`},
		// Fields.
		{"drop sprt 80", `rules.txt:1: unknown field "sprt" (want src, dst, proto, sport, dport, ether, frag, ttl, flags, queue, dscp, type, code, len, port, flowlabel, or tcp, udp, icmp, icmpv6)`},
		{"drop 10.0.0.0/8", `rules.txt:1: unknown field "10.0.0.0/8" (want src, dst, proto, sport, dport, ether, frag, ttl, flags, queue, dscp, type, code, len, port, flowlabel, or tcp, udp, icmp, icmpv6)`},
		{"drop src 10.0.0.0/8 src 11.0.0.0/8", `rules.txt:1: src given twice (each field at most once per rule; write two rules to match either)`},
		{"drop udp dport 1 dport 2", `rules.txt:1: dport given twice (each field at most once per rule; write two rules to match either)`},
		{"drop tcp sport 1 sport 2", `rules.txt:1: sport given twice (each field at most once per rule; write two rules to match either)`},
		{"drop dst 10.0.0.1 dst 10.0.0.2", `rules.txt:1: dst given twice (each field at most once per rule; write two rules to match either)`},
		{"drop ether arp ether lldp", `rules.txt:1: ether given twice (each field at most once per rule; write two rules to match either)`},
		{"drop frag frag", `rules.txt:1: frag given twice (each field at most once per rule; write two rules to match either)`},
		{"drop ttl 1 ttl 2", `rules.txt:1: ttl given twice (each field at most once per rule; write two rules to match either)`},
		{"drop ttl", `rules.txt:1: ttl needs a value (want a TTL or hop limit 0-255, a range like 0-2, a comparison like <3, a list like 1,2,64 or a negated list like !1,2,64)`},
		{"drop ttl 256", `rules.txt:1: ttl 256: 256 is not a TTL 0-255 (want a TTL or hop limit 0-255, a range like 0-2, a comparison like <3, a list like 1,2,64 or a negated list like !1,2,64)`},
		{"drop ttl 3-1", `rules.txt:1: ttl 3-1: range 3-1 is empty (write the lower value first: 1-3)`},
		{"drop ttl 1-", `rules.txt:1: ttl 1-: "" is not a TTL (want a TTL or hop limit 0-255, a range like 0-2, a comparison like <3, a list like 1,2,64 or a negated list like !1,2,64)`},
		{"drop tcp flags", `rules.txt:1: flags needs a value (want flag names fin, syn, rst, psh, ack, urg, ece, cwr separated by commas, each set, or clear with !, as in syn,!ack; or == and the only flags set, as in ==syn or ==none)`},
		{"drop flags syn", `rules.txt:1: flags needs protocol tcp (write e.g. "tcp flags syn")`},
		{"drop udp flags syn,!ack", `rules.txt:1: flags needs protocol tcp (write e.g. "tcp flags syn,!ack")`},
		{"drop tcp flags sin", `rules.txt:1: flags sin: unknown TCP flag "sin" (want flag names fin, syn, rst, psh, ack, urg, ece, cwr separated by commas, each set, or clear with !, as in syn,!ack; or == and the only flags set, as in ==syn or ==none)`},
		{"drop tcp flags ==syn,!ack", `rules.txt:1: flags ==syn,!ack: ! has no place after == (the flags == does not name are clear): write ==syn, or syn,!ack for some flags set and some clear`},
		{"drop tcp flags syn,!syn", `rules.txt:1: flags syn,!syn: syn given twice (name each flag once)`},
		{"drop tcp frag flags syn", `rules.txt:1: frag never matches together with flags: non-first fragments carry no TCP header`},
		{"drop tcp flags syn flags ack", `rules.txt:1: flags given twice (each field at most once per rule; write two rules to match either)`},
		{"drop udp type 3", `rules.txt:1: type needs protocol icmp or icmpv6 (write e.g. "icmp type 3")`},
		{"drop code 1", `rules.txt:1: code needs protocol icmp or icmpv6 (write e.g. "icmp code 1")`},
		{"drop type echo-request icmp", `rules.txt:1: type echo-request: write icmp or icmpv6 before a type name (its number depends on the protocol), or the type's number, not "echo-request"`},
		{"drop icmpv6 type echo", `rules.txt:1: type echo: unknown icmpv6 type "echo" (want a number 0-255 or one of destination-unreachable, echo-reply, echo-request, nd-neighbor-advert, nd-neighbor-solicit, nd-redirect, nd-router-advert, nd-router-solicit, packet-too-big, parameter-problem, time-exceeded)`},
		{"drop icmp frag type 3", `rules.txt:1: frag never matches together with type: non-first fragments carry no ICMP header`},
		{"drop icmp code 5-1", `rules.txt:1: code 5-1: range 5-1 is empty (write the lower value first: 1-5)`},
		{"drop icmp type 300", `rules.txt:1: type 300: 300 is not a number 0-255 (want a number 0-255 (after icmp or icmpv6 also a name such as echo-request), a range like 3-5, a comparison like >=128, a list like 0,8 or a negated list like !0,8)`},
		{"drop len >70000", `rules.txt:1: len >70000: 70000 is not a length 0-65535: FlowSpec lengths have 16 bits and an IPv4 packet has at most 65535 bytes (want a packet length 0-65535, a range like 0-1023, a comparison like >1024, >=1024, <64 or <=64, or a list like 64,1500)`},
		{"drop len", `rules.txt:1: len needs a value (want a packet length 0-65535, a range like 0-1023, a comparison like >1024, a list like 64,1500 or a negated list like !64,1500)`},
		{"drop len <0", `rules.txt:1: len <0: <0 never matches: no value is below 0`},
		{"drop len 2000-1000", `rules.txt:1: len 2000-1000: range 2000-1000 is empty (write the lower value first: 1000-2000)`},
		{"drop len ==100", `rules.txt:1: len ==100: "==100": write the value alone for equality, as in len 100`},
		{"drop len >x", `rules.txt:1: len >x: "x" is not a length (want a packet length 0-65535, a range like 0-1023, a comparison like >1024, a list like 64,1500 or a negated list like !64,1500)`},
		{"drop ether arp len 60", `rules.txt:1: ether arp never matches a rule with src, dst, proto, sport, dport, frag, ttl, flags, dscp, type, code, len, port or flowlabel: those need an IPv4 or IPv6 frame`},
		{"drop frag df src 2001:db8::/32", `rules.txt:1: frag df: IPv6 has no DF bit (RFC 8956's fragment bits are any, first and last): leave df out of a rule for IPv6`},
		{"drop ether ipv6 frag !df", `rules.txt:1: frag !df: IPv6 has no DF bit (RFC 8956's fragment bits are any, first and last): leave df out of a rule for IPv6`},
		{"drop frag first,last", `rules.txt:1: frag first,last never matches: no fragment is both the first and the last (write two rules)`},
		{"drop frag first,!any", `rules.txt:1: frag !any,first never matches: a first or last fragment is a fragment`},
		{"drop frag first,first", `rules.txt:1: frag first,first: first given twice (name each bit once)`},
		{"drop frag frag", `rules.txt:1: frag given twice (each field at most once per rule; write two rules to match either)`},
		{"drop frag first frag", `rules.txt:1: frag given twice (each field at most once per rule; write two rules to match either)`},
		{"drop udp dport 53 frag last", `rules.txt:1: frag last never matches together with ports, flags, type or code: a last fragment is not the first and carries no L4 header (write frag first, or leave them out)`},
		{"drop frag first,bogus", `rules.txt:1: frag first,bogus: unknown fragment bit "bogus" (want frag alone (a fragment other than the first), or fragment bits any, first, last, df separated by commas, each set, or clear with !, as in first or !df or any,!df)`},
		{"drop frag !nf", `rules.txt:1: frag !nf: unknown fragment bit "nf" (want frag alone (a fragment other than the first), or fragment bits any, first, last, df separated by commas, each set, or clear with !, as in first or !df or any,!df)`},
		{"drop port 53", `rules.txt:1: port needs protocol tcp or udp (write e.g. "udp port 53")`},
		{"drop udp port", `rules.txt:1: port needs a value (want a port 0-65535, a range like 1024-65535, a comparison like <1024, a list like 53,123 or a negated list like !53,123)`},
		{"drop udp port 70000", `rules.txt:1: port 70000: 70000 is not a port 0-65535 (want a port 0-65535, a range like 1024-65535, a comparison like <1024, a list like 53,123 or a negated list like !53,123)`},
		{"drop udp port 53 frag", `rules.txt:1: frag never matches together with port: non-first fragments carry no L4 header`},
		{"drop udp port 53 frag last", `rules.txt:1: frag last never matches together with port: a last fragment carries no L4 header (write frag first, or leave port out)`},
		{"drop ttl >255", `rules.txt:1: ttl >255: >255 never matches: no ttl value is above 255`},
		{"drop ttl <0", `rules.txt:1: ttl <0: <0 never matches: no value is below 0`},
		{"drop ttl >256", `rules.txt:1: ttl >256: 256 is not a TTL 0-255 (want a TTL or hop limit 0-255, a range like 0-2, a comparison like <3, a list like 1,2,64 or a negated list like !1,2,64)`},
		{"drop dscp >63", `rules.txt:1: dscp >63: >63 never matches: no dscp value is above 63`},
		{"drop dscp >=64", `rules.txt:1: dscp >=64: 64 is not a codepoint: DSCP has 6 bits, 0-63 (the TOS byte 64 is DSCP 16)`},
		{"drop dscp 64", `rules.txt:1: dscp 64: 64 is not a codepoint: DSCP has 6 bits, 0-63 (the TOS byte 64 is DSCP 16)`},
		{"drop dscp", `rules.txt:1: dscp needs a value (want a codepoint 0-63 or a name: ef, af11 to af43, cs0 to cs7, a range like 8-15, a comparison like >=32, a list like ef,af41 or a negated list like !ef,af41)`},
		{"drop dscp ef2", `rules.txt:1: dscp ef2: unknown codepoint name "ef2" (want a codepoint 0-63, a range like 8-15, or a name: ef, af11 to af43, cs0 to cs7)`},
		{"drop dscp 20-10", `rules.txt:1: dscp 20-10: range 20-10 is empty (write the lower value first: 10-20)`},
		{"drop ether arp ttl 1", `rules.txt:1: ether arp never matches a rule with src, dst, proto, sport, dport, frag, ttl, flags, dscp, type, code, len, port or flowlabel: those need an IPv4 or IPv6 frame`},
		{"drop tcp udp", `rules.txt:1: protocol given twice ("tcp", then "udp"; each field at most once per rule: write a list like proto tcp,udp to match either)`},
		{"drop proto 6 tcp", `rules.txt:1: protocol given twice ("6", then "tcp"; each field at most once per rule: write a list like proto tcp,udp to match either)`},
		// Prefixes.
		{"drop src", `rules.txt:1: src needs a value (want an address or prefix, e.g. src 192.0.2.0/24, src 2001:db8::/32 or src 192.0.2.1)`},
		{"drop src dport 80", `rules.txt:1: src needs a value (want an address or prefix, e.g. src 192.0.2.0/24, src 2001:db8::/32 or src 192.0.2.1)`},
		{"drop dst", `rules.txt:1: dst needs a value (want an address or prefix, e.g. dst 192.0.2.0/24, dst 2001:db8::/32 or dst 192.0.2.1)`},
		{"drop src 10.0.0", `rules.txt:1: src 10.0.0: "10.0.0" is not an IPv4 or IPv6 address (want e.g. 192.0.2.0/24, 2001:db8::/32 or 192.0.2.1)`},
		{"drop src 010.0.0.1", `rules.txt:1: src 010.0.0.1: "010.0.0.1" is not an IPv4 or IPv6 address (want e.g. 192.0.2.0/24, 2001:db8::/32 or 192.0.2.1)`},
		{"drop dst example.com", `rules.txt:1: dst example.com: "example.com" is not an IPv4 or IPv6 address (want e.g. 192.0.2.0/24, 2001:db8::/32 or 192.0.2.1)`},
		{"drop src 10.0.0.0/33", `rules.txt:1: src 10.0.0.0/33: prefix length "33" out of range (want 0-32)`},
		{"drop src 2001:db8::/129", `rules.txt:1: src 2001:db8::/129: prefix length "129" out of range (want 0-128)`},
		{"drop src 10.0.0.0/", `rules.txt:1: src 10.0.0.0/: prefix length "" out of range (want 0-32)`},
		{"drop src 10.0.0.0/-1", `rules.txt:1: src 10.0.0.0/-1: prefix length "-1" out of range (want 0-32)`},
		{"drop src 10.0.0.1/8", `rules.txt:1: src 10.0.0.1/8 has bits set after the prefix length; write 10.0.0.0/8 (or 10.0.0.1/32 for the single address)`},
		{"drop dst 2001:db8::1/32", `rules.txt:1: dst 2001:db8::1/32 has bits set after the prefix length; write 2001:db8::/32 (or 2001:db8::1/128 for the single address)`},
		{"drop src fe80::1%eth0", `rules.txt:1: src fe80::1%eth0: an address with a zone (%eth0) cannot be matched; remove the zone`},
		{"drop src ::ffff:10.0.0.1", `rules.txt:1: src ::ffff:10.0.0.1/128 is an IPv4-mapped IPv6 prefix, which never matches; write the IPv4 prefix 10.0.0.1/32`},
		{"drop src ::ffff:10.0.0.0/104", `rules.txt:1: src ::ffff:10.0.0.0/104 is an IPv4-mapped IPv6 prefix, which never matches; write the IPv4 prefix 10.0.0.0/8`},
		{"drop src 10.0.0.0/8 dst 2001:db8::/32", `rules.txt:1: src 10.0.0.0/8 and dst 2001:db8::/32 are of different address families; a frame is either IPv4 or IPv6, so write two rules`},
		// Protocols.
		{"drop proto", `rules.txt:1: proto needs a value (want tcp, udp, icmp, icmpv6 or a protocol number 0-255, or a list like tcp,udp)`},
		{"drop proto src 10.0.0.0/8", `rules.txt:1: proto needs a value (want tcp, udp, icmp, icmpv6 or a protocol number 0-255, or a list like tcp,udp)`},
		{"drop proto tpc", `rules.txt:1: unknown protocol "tpc" (want tcp, udp, icmp, icmpv6 or a protocol number 0-255, or a list like tcp,udp)`},
		{"drop proto 256", `rules.txt:1: unknown protocol "256" (want tcp, udp, icmp, icmpv6 or a protocol number 0-255, or a list like tcp,udp)`},
		{"drop proto -1", `rules.txt:1: proto -1: "" is not a protocol (want tcp, udp, icmp, icmpv6 or a protocol number 0-255, a range like 1-5, a comparison like >=128, a list like tcp,udp or a negated list like !tcp,udp)`},
		{"drop proto TCP", `rules.txt:1: unknown protocol "TCP" (want tcp, udp, icmp, icmpv6 or a protocol number 0-255, or a list like tcp,udp)`},
		{"drop icmp src 2001:db8::/32", `rules.txt:1: icmp (protocol 1) is IPv4's ICMP and never matches IPv6 frames; use icmpv6`},
		{"drop ether ipv6 proto 1", `rules.txt:1: icmp (protocol 1) is IPv4's ICMP and never matches IPv6 frames; use icmpv6`},
		{"drop icmpv6 dst 10.0.0.0/8", `rules.txt:1: icmpv6 (protocol 58) never matches IPv4 frames; use icmp`},
		{"drop proto 44 src 2001:db8::/32", `rules.txt:1: proto 44 matches IPv6 frames only in non-first fragments (extension headers are skipped and proto is the protocol after them; in a non-first fragment it is the fragment header's next header): add frag, as in "drop proto 44 src 2001:db8::/32 frag"`},
		{"drop ether ipv6 proto 0", `rules.txt:1: proto 0 matches IPv6 frames only in non-first fragments (extension headers are skipped and proto is the protocol after them; in a non-first fragment it is the fragment header's next header): add frag, as in "drop ether ipv6 proto 0 frag"`},
		// Ports.
		{"drop dport 80", `rules.txt:1: dport needs protocol tcp or udp (write e.g. "udp dport 80")`},
		{"drop icmp sport 1-2", `rules.txt:1: sport needs protocol tcp or udp (write e.g. "udp sport 1-2")`},
		{"drop proto 132 dport 80", `rules.txt:1: dport needs protocol tcp or udp (write e.g. "udp dport 80")`},
		{"drop udp dport", `rules.txt:1: dport needs a value (want a port 0-65535, a range like 1024-65535, a comparison like <1024, a list like 53,123 or a negated list like !53,123)`},
		{"drop udp dport frag", `rules.txt:1: dport needs a value (want a port 0-65535, a range like 1024-65535, a comparison like <1024, a list like 53,123 or a negated list like !53,123)`},
		{"drop udp dport 65536", `rules.txt:1: dport 65536: 65536 is not a port 0-65535 (want a port 0-65535, a range like 1024-65535, a comparison like <1024, a list like 53,123 or a negated list like !53,123)`},
		{"drop udp dport 123456", `rules.txt:1: dport 123456: 123456 is not a port 0-65535 (want a port 0-65535, a range like 1024-65535, a comparison like <1024, a list like 53,123 or a negated list like !53,123)`},
		{"drop udp dport http", `rules.txt:1: dport http: "http" is not a port (want a port 0-65535, a range like 1024-65535, a comparison like <1024, a list like 53,123 or a negated list like !53,123)`},
		{"drop udp sport 1-", `rules.txt:1: sport 1-: "" is not a port (want a port 0-65535, a range like 1024-65535, a comparison like <1024, a list like 53,123 or a negated list like !53,123)`},
		{"drop udp sport -5", `rules.txt:1: sport -5: "" is not a port (want a port 0-65535, a range like 1024-65535, a comparison like <1024, a list like 53,123 or a negated list like !53,123)`},
		{"drop udp sport 1-2-3", `rules.txt:1: sport 1-2-3: "2-3" is not a port (want a port 0-65535, a range like 1024-65535, a comparison like <1024, a list like 53,123 or a negated list like !53,123)`},
		{"drop udp dport 2000-1000", `rules.txt:1: dport 2000-1000: range 2000-1000 is empty (write the lower value first: 1000-2000)`},
		// Value lists, negated lists and comparisons on every numeric field (issue 20).
		{"drop flowlabel 5 src 10.0.0.0/8", `rules.txt:1: flowlabel is IPv6's (RFC 8956): IPv4 has no flow label, so an IPv4 rule with one never matches; leave it out, or write the rule for IPv6 (an IPv6 src or dst, or ether ipv6)`},
		{"drop ether ipv4 flowlabel 1", `rules.txt:1: flowlabel is IPv6's (RFC 8956): IPv4 has no flow label, so an IPv4 rule with one never matches; leave it out, or write the rule for IPv6 (an IPv6 src or dst, or ether ipv6)`},
		{"drop icmp flowlabel 1", `rules.txt:1: flowlabel never matches with icmp (IPv4's ICMP): write icmpv6`},
		{"drop flowlabel 0x100000", `rules.txt:1: flowlabel 0x100000: 1048576 is not a flow label 0-1048575 (want an IPv6 flow label 0-1048575 or 0x0-0xfffff, a range like 0x100-0x1ff, a comparison like <0x100, a list like 0x12345,7 or a negated list like !0x12345,7)`},
		{"drop flowlabel 1048576", `rules.txt:1: flowlabel 1048576: 1048576 is not a flow label 0-1048575 (want an IPv6 flow label 0-1048575 or 0x0-0xfffff, a range like 0x100-0x1ff, a comparison like <0x100, a list like 0x12345,7 or a negated list like !0x12345,7)`},
		{"drop flowlabel 0x", `rules.txt:1: flowlabel 0x: "0x" is not a flow label (want an IPv6 flow label 0-1048575 or 0x0-0xfffff, a range like 0x100-0x1ff, a comparison like <0x100, a list like 0x12345,7 or a negated list like !0x12345,7)`},
		{"drop flowlabel 0xfffff,!1", `rules.txt:1: flowlabel 0xfffff,!1: ! goes before the whole list and negates it (write !0xfffff,1 for none of them)`},
		{"drop udp dport 53,,123", `rules.txt:1: dport 53,,123: empty item in the list (write the items separated by single commas, as in 53,123)`},
		{"drop udp dport 53,", `rules.txt:1: dport 53,: empty item in the list (write the items separated by single commas, as in 53,123)`},
		{"drop udp dport ,53", `rules.txt:1: dport ,53: empty item in the list (write the items separated by single commas, as in 53,123)`},
		{"drop udp dport 53,53", `rules.txt:1: dport 53,53: 53 given twice (name each value once in a list)`},
		{"drop udp dport 1-100,50", `rules.txt:1: dport 1-100,50: 1-100 and 50 overlap (name each value once in a list)`},
		{"drop udp dport !", `rules.txt:1: dport !: nothing after ! (want a port 0-65535, a range like 1024-65535, a comparison like <1024, a list like 53,123 or a negated list like !53,123)`},
		{"drop udp dport 53,!123", `rules.txt:1: dport 53,!123: ! goes before the whole list and negates it (write !53,123 for none of them)`},
		{"drop udp dport !0-65535", `rules.txt:1: dport !0-65535: !0-65535 never matches: it excludes every value (leave the field out to match any)`},
		{"drop udp dport 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33", `rules.txt:1: dport 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30…(89 bytes): a list of 33 items: at most 32 in one list (write two rules, or ranges like 1024-65535)`},
		{"drop dport 53,123", `rules.txt:1: dport needs protocol tcp or udp (write e.g. "udp dport 53,123")`},
		{"drop ttl <0,5", `rules.txt:1: ttl <0,5: <0 never matches: no value is below 0`},
		{"drop dscp 64", `rules.txt:1: dscp 64: 64 is not a codepoint: DSCP has 6 bits, 0-63 (the TOS byte 64 is DSCP 16)`},
		{"drop dscp ef,ef", `rules.txt:1: dscp ef,ef: ef given twice (name each value once in a list)`},
		{"drop udp len >70000", `rules.txt:1: len >70000: 70000 is not a length 0-65535: FlowSpec lengths have 16 bits and an IPv4 packet has at most 65535 bytes (want a packet length 0-65535, a range like 0-1023, a comparison like >1024, >=1024, <64 or <=64, or a list like 64,1500)`},
		{"drop udp len 64,70000", `rules.txt:1: len 64,70000: 70000 is not a length 0-65535: FlowSpec lengths have 16 bits and an IPv4 packet has at most 65535 bytes (want a packet length 0-65535, a range like 0-1023, a comparison like >1024, >=1024, <64 or <=64, or a list like 64,1500)`},
		{"drop icmp type 3,300", `rules.txt:1: type 3,300: 300 is not a number 0-255 (want a number 0-255 (after icmp or icmpv6 also a name such as echo-request), a range like 3-5, a comparison like >=128, a list like 0,8 or a negated list like !0,8)`},
		{"drop udp type 3", `rules.txt:1: type needs protocol icmp or icmpv6 (write e.g. "icmp type 3")`},
		{"drop udp flags syn", `rules.txt:1: flags needs protocol tcp (write e.g. "tcp flags syn")`},
		{"drop udp port 53,==54", `rules.txt:1: port 53,==54: "==54": write the value alone for equality, as in port 54`},
		{"drop queue 300", `rules.txt:1: queue 300: 300 is not an rx queue 0-255 (want an rx queue 0-255, a range like 0-3, a comparison like >=4, a list like 0,2 or a negated list like !0,2)`},
		{"drop udp sport <0", `rules.txt:1: sport <0: <0 never matches: no value is below 0`},
		{"drop udp dport 53 frag", `rules.txt:1: frag never matches together with dport: non-first fragments carry no L4 header`},
		// Ether.
		{"drop ether", `rules.txt:1: ether needs a value (want arp, lldp, ipv4, ipv6 or a hex EtherType like 0x88cc)`},
		{"drop ether foo", `rules.txt:1: ether foo: unknown EtherType (want arp, lldp, ipv4, ipv6 or a hex EtherType like 0x88cc)`},
		{"drop ether 2054", `rules.txt:1: ether 2054: unknown EtherType (want arp, lldp, ipv4, ipv6 or a hex EtherType like 0x88cc)`},
		{"drop ether 0x", `rules.txt:1: ether 0x: unknown EtherType (want arp, lldp, ipv4, ipv6 or a hex EtherType like 0x88cc)`},
		{"drop ether 0x10000", `rules.txt:1: ether 0x10000: unknown EtherType (want arp, lldp, ipv4, ipv6 or a hex EtherType like 0x88cc)`},
		{"drop ether 0xzz", `rules.txt:1: ether 0xzz: unknown EtherType (want arp, lldp, ipv4, ipv6 or a hex EtherType like 0x88cc)`},
		{"drop ether 0x0", `rules.txt:1: ether 0x0: 0 is not an EtherType (want arp, lldp, ipv4, ipv6 or a hex EtherType like 0x88cc)`},
		{"drop ether vlan", `rules.txt:1: ether vlan: never matches: VLAN tags are skipped and ether matches the EtherType after them`},
		{"drop ether 0x8100", `rules.txt:1: ether 0x8100 never matches: VLAN tags are skipped and ether matches the EtherType after them`},
		{"drop ether 0x88a8", `rules.txt:1: ether 0x88a8 never matches: VLAN tags are skipped and ether matches the EtherType after them`},
		{"drop ether arp src 10.0.0.0/8", `rules.txt:1: ether arp never matches a rule with src, dst, proto, sport, dport, frag, ttl, flags, dscp, type, code, len, port or flowlabel: those need an IPv4 or IPv6 frame`},
		{"drop ether lldp frag", `rules.txt:1: ether lldp never matches a rule with src, dst, proto, sport, dport, frag, ttl, flags, dscp, type, code, len, port or flowlabel: those need an IPv4 or IPv6 frame`},
		{"drop ether 0x88e5 udp", `rules.txt:1: ether 0x88e5 never matches a rule with src, dst, proto, sport, dport, frag, ttl, flags, dscp, type, code, len, port or flowlabel: those need an IPv4 or IPv6 frame`},
		{"drop ether ipv4 src 2001:db8::/32", `rules.txt:1: ether ipv4 never matches an IPv6 prefix`},
		{"drop ether ipv6 dst 10.0.0.0/8", `rules.txt:1: ether ipv6 never matches an IPv4 prefix`},
		// Whole-file checks.
		{"drop src 10.0.0.0/8\n# x\npass src 10.0.0.0/8", `rules.txt:3: prefix 10.0.0.0/8 already has a rule on line 1 (each prefix at most once in "ACTION src PREFIX" rules)`},
		{"drop src 192.0.2.1\ndrop src 192.0.2.1/32", `rules.txt:2: prefix 192.0.2.1/32 already has a rule on line 1 (each prefix at most once in "ACTION src PREFIX" rules)`},
		{"drop src 2001:db8::/32\ndrop src 2001:0db8::/32", `rules.txt:2: prefix 2001:db8::/32 already has a rule on line 1 (each prefix at most once in "ACTION src PREFIX" rules)`},
		// Line numbers count blank and comment lines.
		{"\n\n# c\n  \ndrop src 10.0.0.0/8\ndrop src", `rules.txt:6: src needs a value (want an address or prefix, e.g. src 192.0.2.0/24, src 2001:db8::/32 or src 192.0.2.1)`},
	} {
		t.Run(tc.text, func(t *testing.T) {
			rs, err := Parse(strings.NewReader(tc.text), "rules.txt")
			if err == nil {
				t.Fatalf("Parse(%q) = %+v, want error %s", tc.text, rs, tc.want)
			}
			if err.Error() != tc.want {
				t.Errorf("Parse(%q) error:\n got %s\nwant %s", tc.text, err, tc.want)
			}
			var pe *ParseError
			if !errors.As(err, &pe) || pe.File != "rules.txt" || pe.Line == 0 {
				t.Errorf("error %#v is not a *ParseError with File and Line", err)
			}
		})
	}
}

func TestParseErrorWithoutName(t *testing.T) {
	_, err := Parse(strings.NewReader("drop\nfoo"), "")
	if want := `line 2: unknown action "foo" (want drop, pass, redirect or limit, or a policy or malformed line)`; err == nil || err.Error() != want {
		t.Errorf("got %v, want %s", err, want)
	}
}

func TestParseDuplicateSentinel(t *testing.T) {
	_, err := Parse(strings.NewReader("drop src 10.0.0.0/8\ndrop src 10.0.0.0/8"), "r")
	var pe *ParseError
	if !errors.Is(err, ErrDuplicatePrefix) || !errors.As(err, &pe) || pe.Line != 2 {
		t.Errorf("got %v, want ErrDuplicatePrefix on line 2", err)
	}
	// The same prefix in compound rules, or as src and dst, is fine: those are ordered.
	if _, err := Parse(strings.NewReader("drop src 10.0.0.0/8\ndrop udp src 10.0.0.0/8\npass dst 10.0.0.0/8\npass udp src 10.0.0.0/8"), "r"); err != nil {
		t.Errorf("same prefix in compound rules: %v", err)
	}
}

func TestParseDuplicateOrder(t *testing.T) {
	// The first line that repeats an earlier prefix is reported, with the
	// earlier line.
	_, err := Parse(strings.NewReader("drop src 10.0.0.0/8\ndrop src 2001:db8::/32\ndrop src 2001:db8::/32\ndrop src 10.0.0.0/8\n"), "r")
	if want := `r:3: prefix 2001:db8::/32 already has a rule on line 2 (each prefix at most once in "ACTION src PREFIX" rules)`; err == nil || err.Error() != want {
		t.Errorf("got %v, want %s", err, want)
	}
	// Errors in single lines come before repeated prefixes.
	_, err = Parse(strings.NewReader("drop src 10.0.0.0/8\ndrop src 10.0.0.0/8\ndrop bogus\n"), "r")
	if want := `r:3: unknown field "bogus" (want src, dst, proto, sport, dport, ether, frag, ttl, flags, queue, dscp, type, code, len, port, flowlabel, or tcp, udp, icmp, icmpv6)`; err == nil || err.Error() != want {
		t.Errorf("got %v, want %s", err, want)
	}
	// Same address, different length, and IPv4 vs IPv6 are different prefixes.
	if _, err := Parse(strings.NewReader("drop src 10.0.0.0/8\ndrop src 10.0.0.0/16\ndrop src ::a00:0/104\ndrop src 0.0.0.0/0\ndrop src ::/0\n"), "r"); err != nil {
		t.Errorf("distinct prefixes: %v", err)
	}
}

func TestCheckDuplicatePrefixesCollision(t *testing.T) {
	// Equal fingerprints of different prefixes are not duplicates.
	rules := PrefixRules(ActionDrop, []netip.Prefix{pfx("2001:db8::/32"), pfx("2001:db9::/32")})
	if dup, _ := checkDuplicatePrefixes([]uint64{7, 7}, rules); dup != nil {
		t.Errorf("fingerprint collision reported as duplicate %v", dup)
	}
}

func TestRadixSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{0, 1, 2, 3, 100, 5000} {
		for _, gen := range []func() uint64{
			rng.Uint64,
			func() uint64 { return uint64(rng.Uint32())<<8 | uint64(rng.IntN(33)) }, // IPv4 keys
			func() uint64 { return uint64(rng.IntN(3)) << 62 },                      // few distinct, high bits only
			func() uint64 { return 42 },
		} {
			keys := make([]uint64, n)
			for i := range keys {
				keys[i] = gen()
			}
			want := slices.Clone(keys)
			slices.Sort(want)
			radixSort(keys)
			if !slices.Equal(keys, want) {
				t.Fatalf("n=%d: radixSort differs from slices.Sort", n)
			}
		}
	}
}

func TestParseCompoundLimit(t *testing.T) {
	var b strings.Builder
	b.WriteString("drop src 10.0.0.0/8\n") // prefix rules do not count
	for i := range MaxCompoundRules {
		fmt.Fprintf(&b, "drop udp dport %d\n", i)
	}
	b.WriteString("drop src 10.1.0.0/16\n")
	rs, err := Parse(strings.NewReader(b.String()), "rules.txt")
	if err != nil {
		t.Fatalf("%d compound rules: %v", MaxCompoundRules, err)
	}
	if len(rs.Rules) != MaxCompoundRules+2 {
		t.Fatalf("got %d rules", len(rs.Rules))
	}
	b.WriteString("drop tcp dport 1\n")
	_, err = Parse(strings.NewReader(b.String()), "rules.txt")
	want := `rules.txt:259: too many compound rules: this is number 257, at most 256 are allowed (rules that are only "ACTION src PREFIX" or "ACTION dst PREFIX" do not count)`
	if err == nil || err.Error() != want || !errors.Is(err, ErrTooManyRules) {
		t.Errorf("257 compound rules: got %v, want %s", err, want)
	}
}

type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, errors.New("disk on fire") }

func TestParseReadError(t *testing.T) {
	_, err := Parse(failingReader{}, "rules.txt")
	if err == nil || err.Error() != "read rules rules.txt: disk on fire" {
		t.Errorf("got %v", err)
	}
}

func TestPrefixRules(t *testing.T) {
	ps := []netip.Prefix{pfx("192.0.2.0/24"), pfx("2001:db8::/32")}
	got := PrefixRules(ActionDrop, ps)
	want := []Rule{{Action: ActionDrop, Src: ps[0]}, {Action: ActionDrop, Src: ps[1]}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v", got)
	}
	for _, r := range got {
		if !r.IsPrefixOnly() {
			t.Errorf("%v is not prefix-only", r)
		}
	}
	rs := &RuleSet{Rules: append(got, PrefixRules(ActionPass, ps[:1])...)}
	if err := rs.Validate(); !errors.Is(err, ErrDuplicatePrefix) {
		t.Errorf("Validate of a repeated prefix: %v, want ErrDuplicatePrefix", err)
	}
	if len(PrefixRules(ActionDrop, nil)) != 0 {
		t.Error("PrefixRules(nil) is not empty")
	}
}

// millionPrefixes returns a rule file of n distinct prefix rules, IPv4 or
// IPv6, with prefix lengths 16 to 32 (IPv4) or 32 to 128 (IPv6).
func millionPrefixes(n int, v6 bool) string {
	var b strings.Builder
	b.Grow(n * 40)
	for i := range n {
		x := uint32(i)*2654435761 | 1 // spread over the address space
		if v6 {
			a := netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, byte(i >> 24), byte(i >> 16), byte(i >> 8), byte(i), byte(x >> 24), byte(x >> 16)})
			p, _ := a.Prefix(64 + i%3*16)
			b.WriteString("drop src ")
			b.WriteString(p.String())
			b.WriteByte('\n')
			continue
		}
		// i itself in the top 20 bits keeps the /20../32 prefixes distinct.
		a := netip.AddrFrom4([4]byte{byte(i >> 12), byte(i >> 4), byte(i<<4) | byte(x>>28&0xf), byte(x)})
		bits := 20 + i%13
		p, _ := a.Prefix(bits)
		b.WriteString("drop src ")
		b.WriteString(p.String())
		b.WriteByte('\n')
	}
	return b.String()
}

func TestParseManyPrefixes(t *testing.T) {
	n := 1_000_000
	if testing.Short() {
		n = 100_000
	}
	for _, v6 := range []bool{false, true} {
		text := millionPrefixes(n, v6)
		rs, err := Parse(strings.NewReader(text), "big.rules")
		if err != nil {
			t.Fatal(err)
		}
		if len(rs.Rules) != n {
			t.Fatalf("v6=%v: %d rules, want %d", v6, len(rs.Rules), n)
		}
		last := rs.Rules[n-1]
		if !last.IsPrefixOnly() || last.Line != n || last.Src.Addr().Is6() != v6 {
			t.Errorf("last rule %+v", last)
		}
	}
}

func BenchmarkParsePrefixes(b *testing.B) {
	for _, tc := range []struct {
		name string
		n    int
		v6   bool
	}{{"v4-1M", 1_000_000, false}, {"v6-1M", 1_000_000, true}} {
		text := millionPrefixes(tc.n, tc.v6)
		// Baseline: the least any parser must do, split lines and parse each prefix.
		b.Run(tc.name+"/baseline-split-and-ParsePrefix", func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				n := 0
				for line := range strings.Lines(text) {
					f := strings.Fields(line)
					if _, err := netip.ParsePrefix(f[2]); err != nil {
						b.Fatal(err)
					}
					n++
				}
				if n != tc.n {
					b.Fatal(n)
				}
			}
		})
		// Baseline: allocating and filling the []Rule that Parse returns.
		b.Run(tc.name+"/baseline-fill-rules", func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			p := pfx("2001:db8::/32")
			if !tc.v6 {
				p = pfx("192.0.2.0/24")
			}
			for b.Loop() {
				rules := make([]Rule, 0, tc.n)
				for i := range tc.n {
					rules = append(rules, Rule{Action: ActionDrop, Src: p, Line: i + 1})
				}
				if len(rules) != tc.n {
					b.Fatal(len(rules))
				}
			}
		})
		b.Run(tc.name+"/Parse", func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				rs, err := Parse(strings.NewReader(text), "bench")
				if err != nil || len(rs.Rules) != tc.n {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestParseErrorClipsLongInput: an error quotes at most 80 bytes of a
// value from the file and then its length, however long the line is.
func TestParseErrorClipsLongInput(t *testing.T) {
	long := strings.Repeat("x", 1<<20)
	for _, tc := range []struct{ line, want string }{
		{long, `line 1: unknown action "` + long[:80] + `"…(1048576 bytes) (want drop`},
		{"drop " + long, `line 1: unknown field "` + long[:80] + `"…(1048576 bytes) (want src`},
		{"drop src " + long, "line 1: src " + long[:80] + `…(1048576 bytes): "` + long[:80] + `"…(1048576 bytes) is not an IPv4`},
		{"drop src 10.0.0.0/" + long, `prefix length "` + long[:80] + `"…(1048576 bytes) out of range`},
		{"drop src fe80::1%" + long, "an address with a zone (%" + long[:80] + "…(1048576 bytes)) cannot be matched"},
		{"drop udp dport 1-" + long, `"` + long[:80] + `"…(1048576 bytes) is not a port`},
		{"drop proto " + long, `unknown protocol "` + long[:80] + `"…(1048576 bytes)`},
		{"drop ether " + long, "ether " + long[:80] + "…(1048576 bytes): unknown EtherType"},
		{"policy " + long, `unknown policy "` + long[:80] + `"…(1048576 bytes)`},
		// Multi-byte characters are not cut in the middle.
		{strings.Repeat("é", 1000), `unknown action "` + strings.Repeat("é", 40) + `"…(2000 bytes)`},
	} {
		_, err := Parse(strings.NewReader(tc.line), "")
		if err == nil {
			t.Fatalf("Parse(%.40q...) accepted it", tc.line)
		}
		if msg := err.Error(); !strings.Contains(msg, tc.want) || len(msg) > 500 {
			t.Errorf("Parse(%.40q...): error of %d bytes %.600q\nwant it to hold %.300q", tc.line, len(msg), msg, tc.want)
		}
	}
	// Short values are quoted whole, as before.
	_, err := Parse(strings.NewReader("drp src 10.0.0.0/8"), "")
	if want := `line 1: unknown action "drp" (want drop`; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error %v, want %q...", err, want)
	}
}
