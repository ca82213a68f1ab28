package agent

import (
	"errors"
	"fmt"
	"net"
	"sort"
	"strings"
	"testing"

	"github.com/osrg/gobgp/v3/pkg/packet/bgp"
)

// Helpers that build FlowSpec components the way they arrive on the wire.

func dst4(p string) bgp.FlowSpecComponentInterface {
	ip, n, _ := net.ParseCIDR(p)
	l, _ := n.Mask.Size()
	return bgp.NewFlowSpecDestinationPrefix(bgp.NewIPAddrPrefix(uint8(l), ip.String()))
}

func src4(p string) bgp.FlowSpecComponentInterface {
	ip, n, _ := net.ParseCIDR(p)
	l, _ := n.Mask.Size()
	return bgp.NewFlowSpecSourcePrefix(bgp.NewIPAddrPrefix(uint8(l), ip.String()))
}

func dst6(p string, off uint8) bgp.FlowSpecComponentInterface {
	ip, n, _ := net.ParseCIDR(p)
	l, _ := n.Mask.Size()
	return bgp.NewFlowSpecDestinationPrefix6(bgp.NewIPv6AddrPrefix(uint8(l), ip.String()), off)
}

func src6(p string, off uint8) bgp.FlowSpecComponentInterface {
	ip, n, _ := net.ParseCIDR(p)
	l, _ := n.Mask.Size()
	return bgp.NewFlowSpecSourcePrefix6(bgp.NewIPv6AddrPrefix(uint8(l), ip.String()), off)
}

// item is one {op, value}; ops are written as in RFC 8955: "&" for AND,
// "<", ">", "=" (combinable), "!" not and "m" match for bitmasks.
func item(op string, v uint64) *bgp.FlowSpecComponentItem {
	var o uint8
	for _, c := range op {
		switch c {
		case '&':
			o |= opAnd
		case '<':
			o |= opLT
		case '>':
			o |= opGT
		case '=':
			o |= opEQ
		case '!':
			o |= opNot
		case 'm':
			o |= opMatch
		}
	}
	return bgp.NewFlowSpecComponentItem(o, v)
}

func comp(t int, items ...*bgp.FlowSpecComponentItem) bgp.FlowSpecComponentInterface {
	return bgp.NewFlowSpecComponent(bgp.BGPFlowSpecType(t), items)
}

func discard() []bgp.ExtendedCommunityInterface {
	return []bgp.ExtendedCommunityInterface{bgp.NewTrafficRateExtended(0, 0)}
}

func texts(tr Translation) string {
	var s []string
	for _, r := range tr.Rules {
		s = append(s, r.String())
	}
	return strings.Join(s, " | ")
}

func TestTranslateExact(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    Route
		want string
	}{
		{"prefix only stays compound (ordered with the other routes)",
			Route{4, []bgp.FlowSpecComponentInterface{src4("203.0.113.0/24")}, discard()},
			"drop ether ipv4 src 203.0.113.0/24"},
		{"dst, proto, port",
			Route{4, []bgp.FlowSpecComponentInterface{dst4("198.51.100.0/24"), comp(fsProto, item("=", 17)), comp(fsDstPort, item("=", 53))}, discard()},
			"drop ether ipv4 udp dst 198.51.100.0/24 dport 53"},
		{"port range as >= AND <=",
			Route{4, []bgp.FlowSpecComponentInterface{comp(fsProto, item("=", 6)), comp(fsDstPort, item(">=", 1000), item("&<=", 2000))}, discard()},
			"drop ether ipv4 tcp dport 1000-2000"},
		{"ports without a protocol are TCP's or UDP's",
			Route{4, []bgp.FlowSpecComponentInterface{comp(fsDstPort, item("=", 11211))}, discard()},
			"drop ether ipv4 proto tcp,udp dport 11211"},
		{"an OR list of ports is a value list",
			Route{4, []bgp.FlowSpecComponentInterface{comp(fsProto, item("=", 17)), comp(fsSrcPort, item("=", 53), item("=", 123))}, discard()},
			"drop ether ipv4 udp sport 53,123"},
		{"a list longer than the language takes expands, one rule per range",
			Route{4, []bgp.FlowSpecComponentInterface{comp(fsProto, item("=", 17)), comp(fsDstPort, manyItems(40)...)}, discard()},
			manyRules(40)},
		{"len values and ranges",
			Route{4, []bgp.FlowSpecComponentInterface{comp(fsLen, item("=", 64), item(">=", 1500), item("&<=", 1600))}, discard()},
			"drop ether ipv4 len 64,1500-1600"},
		{"len > is a range up to 65535, never negated",
			Route{4, []bgp.FlowSpecComponentInterface{comp(fsLen, item("<", 100), item(">", 200))}, discard()},
			"drop ether ipv4 len 0-99,201-65535"},
		{"ICMP type list and code",
			Route{4, []bgp.FlowSpecComponentInterface{comp(fsICMPType, item("=", 0), item("=", 8)), comp(fsICMPCode, item("=", 0))}, discard()},
			"drop ether ipv4 icmp type 0,8 code 0"},
		{"DSCP list",
			Route{6, []bgp.FlowSpecComponentInterface{comp(fsDSCP, item("=", 46), item("=", 34))}, discard()},
			"drop ether ipv6 dscp 34,46"},
		{"flow label, in hexadecimal",
			Route{6, []bgp.FlowSpecComponentInterface{comp(fsFlowLabel, item("=", 0x12345), item(">=", 0x100), item("&<=", 0x1ff))}, discard()},
			"drop ether ipv6 flowlabel 0x100-0x1ff,0x12345"},
		{"IPv6 destination prefix with an offset: bits 32-63 only, the first bits (not matched) cleared",
			Route{6, []bgp.FlowSpecComponentInterface{dst6("2001:db8:1:2::/64", 32)}, discard()},
			"drop ether ipv6 dst 0:0:1:2::/64/32"},
		{"IPv6 source prefix with an offset across bit 64, as RFC 8956 3.8.2's",
			Route{6, []bgp.FlowSpecComponentInterface{src6("::1:1234:5678:9800:0/104", 60), comp(fsProto, item("=", 17))}, discard()},
			"drop ether ipv6 udp src ::1:1234:5678:9800:0/104/60"},
		{"IPv6 offset 0 is a prefix from bit 0",
			Route{6, []bgp.FlowSpecComponentInterface{src6("2001:db8::/32", 0)}, discard()},
			"drop ether ipv6 src 2001:db8::/32"},
		{"flow label != 0",
			Route{6, []bgp.FlowSpecComponentInterface{dst6("2001:db8::/32", 0), comp(fsFlowLabel, item("<>", 0))}, discard()},
			"drop ether ipv6 dst 2001:db8::/32 flowlabel 0x1-0xfffff"},
		{"port != is a negated list",
			Route{4, []bgp.FlowSpecComponentInterface{comp(fsProto, item("=", 6)), comp(fsPort, item("<>", 22), item("&<>", 443))}, discard()},
			"drop ether ipv4 tcp port !22,443"},
		{"IsF is a fragment other than the first, not any fragment",
			Route{4, []bgp.FlowSpecComponentInterface{comp(fsProto, item("=", 17)), comp(fsFragment, item("m", 0x02))}, discard()},
			"drop ether ipv4 udp frag any,!first"},
		{"IsF with DF clear",
			Route{4, []bgp.FlowSpecComponentInterface{comp(fsFragment, item("m", 0x02), item("&!m", 0x01))}, discard()},
			"drop ether ipv4 frag any,!first,!df"},
		{"FF is the first fragment",
			Route{4, []bgp.FlowSpecComponentInterface{comp(fsFragment, item("m", 0x04))}, discard()},
			"drop ether ipv4 frag first"},
		{"port is one rule: source or destination port",
			Route{4, []bgp.FlowSpecComponentInterface{comp(fsProto, item("=", 17)), comp(fsPort, item("=", 53))}, discard()},
			"drop ether ipv4 udp port 53"},
		{"!= is two ranges",
			Route{4, []bgp.FlowSpecComponentInterface{comp(fsProto, item("=", 6)), comp(fsDstPort, item("<>", 22))}, discard()},
			"drop ether ipv4 tcp dport !22"},
		{"AND binds tighter than OR",
			// =80 OR (>=8000 AND <=8080)
			Route{4, []bgp.FlowSpecComponentInterface{comp(fsProto, item("=", 6)), comp(fsDstPort, item("=", 80), item(">=", 8000), item("&<=", 8080))}, discard()},
			"drop ether ipv4 tcp dport 80,8000-8080"},
		{"protocol with ports narrows to TCP",
			Route{4, []bgp.FlowSpecComponentInterface{comp(fsProto, item("=", 6), item("=", 1)), comp(fsDstPort, item("=", 80))}, discard()},
			"drop ether ipv4 tcp dport 80"},
		{"no action accepts",
			Route{6, []bgp.FlowSpecComponentInterface{dst6("2001:db8::/32", 0), comp(fsProto, item("=", 17))}, nil},
			"pass ether ipv6 udp dst 2001:db8::/32"},
		{"traffic-rate-packets 0 discards too",
			Route{4, []bgp.FlowSpecComponentInterface{comp(fsProto, item("=", 47))}, []bgp.ExtendedCommunityInterface{ratePackets(0)}},
			"drop ether ipv4 proto 47"},
		{"drop with the terminal bit: nothing follows a drop",
			Route{4, []bgp.FlowSpecComponentInterface{dst4("10.0.0.0/8")}, append(discard(), bgp.NewTrafficActionExtended(true, false))},
			"drop ether ipv4 dst 10.0.0.0/8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := Translate(tc.r, TranslateOptions{})
			if err != nil {
				t.Fatalf("Translate: %v", err)
			}
			if got := texts(tr); got != tc.want {
				t.Errorf("rules:\n got  %s\n want %s", got, tc.want)
			}
		})
	}
}

// manyItems are n FlowSpec items =10, =20, ... (an OR of n values).
func manyItems(n int) []*bgp.FlowSpecComponentItem {
	var its []*bgp.FlowSpecComponentItem
	for i := range n {
		its = append(its, item("=", uint64(10*(i+1))))
	}
	return its
}

// manyRules are the rules of manyItems(n) as destination ports of UDP.
func manyRules(n int) string {
	var rs []string
	for i := range n {
		rs = append(rs, fmt.Sprintf("drop ether ipv4 udp dport %d", 10*(i+1)))
	}
	return strings.Join(rs, " | ")
}

func ratePackets(r float32) bgp.ExtendedCommunityInterface {
	b, _ := bgp.NewTrafficRateExtended(0, r).Serialize()
	b[1] = ecRatePackets
	return &bgp.UnknownExtended{Type: bgp.ExtendedCommunityAttrType(b[0]), Value: b[1:]}
}

// Routes the rule language cannot express exactly are refused, never
// widened or narrowed, and the reason says what.
func TestTranslateRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    Route
		want string
	}{
		{"redirect to VRF", Route{4, []bgp.FlowSpecComponentInterface{dst4("10.0.0.0/8")}, []bgp.ExtendedCommunityInterface{bgp.NewRedirectTwoOctetAsSpecificExtended(65000, 100)}}, "redirect to VRF"},
		{"DSCP marking", Route{4, []bgp.FlowSpecComponentInterface{dst4("10.0.0.0/8")}, []bgp.ExtendedCommunityInterface{bgp.NewTrafficRemarkExtended(46)}}, "traffic-marking"},
		{"sample and go on", Route{4, []bgp.FlowSpecComponentInterface{dst4("10.0.0.0/8")}, []bgp.ExtendedCommunityInterface{bgp.NewTrafficActionExtended(true, true)}}, "traffic-action sample with the terminal-action bit"},
		{"two rates", Route{4, []bgp.FlowSpecComponentInterface{dst4("10.0.0.0/8")}, append(discard(), bgp.NewTrafficRateExtended(0, 0))}, "2 traffic-rate actions"},
		{"IPv6 offset not below the length", Route{6, []bgp.FlowSpecComponentInterface{dst6("::1:0:0:0/64", 64)}, discard()}, "offset 64: the offset is not below the length"},
		{"unknown component", Route{4, []bgp.FlowSpecComponentInterface{&bgp.FlowSpecUnknown{Value: []byte{14, 0x81, 1}}}, discard()}, "unknown component type 14"},
		{"IsF clear", Route{4, []bgp.FlowSpecComponentInterface{comp(fsFragment, item("!m", 0x02))}, discard()}, "IsF clear"},
		{"IsF and FF", Route{4, []bgp.FlowSpecComponentInterface{comp(fsFragment, item("m", 0x06))}, discard()}, "matches no packet"},
		{"ICMP and ports", Route{4, []bgp.FlowSpecComponentInterface{comp(fsDstPort, item("=", 80)), comp(fsICMPType, item("=", 8))}, discard()}, "matches no packet"},
		{"flow label in IPv4", Route{4, []bgp.FlowSpecComponentInterface{comp(fsFlowLabel, item("=", 5))}, discard()}, "not defined for IPv4"},
		{"too many rules: lists longer than the language takes, one rule per pair", Route{4, []bgp.FlowSpecComponentInterface{comp(fsProto, item("=", 17)), comp(fsDstPort, manyItems(40)...), comp(fsSrcPort, manyItems(40)...)}, discard()}, "more than 32 rules"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := Translate(tc.r, TranslateOptions{MaxRules: 32})
			if err == nil {
				t.Fatalf("Translate gave %q, want refused (%s)", texts(tr), tc.want)
			}
			if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q, want ErrRefused saying %q", err, tc.want)
			}
		})
	}
}

// Sets of values: every operator combination of RFC 8955 4.2.1.1.
func TestNumericSet(t *testing.T) {
	for _, tc := range []struct {
		items []*bgp.FlowSpecComponentItem
		want  string
	}{
		{[]*bgp.FlowSpecComponentItem{item("=", 5)}, "5"},
		{[]*bgp.FlowSpecComponentItem{item("<", 5)}, "0-4"},
		{[]*bgp.FlowSpecComponentItem{item("<=", 5)}, "0-5"},
		{[]*bgp.FlowSpecComponentItem{item(">", 250)}, "251-255"},
		{[]*bgp.FlowSpecComponentItem{item(">=", 250)}, "250-255"},
		{[]*bgp.FlowSpecComponentItem{item("<>", 7)}, "0-6,8-255"},
		{[]*bgp.FlowSpecComponentItem{item("<>=", 7)}, "0-255"},
		{[]*bgp.FlowSpecComponentItem{item("", 7)}, ""},
		{[]*bgp.FlowSpecComponentItem{item("<", 0)}, ""},
		{[]*bgp.FlowSpecComponentItem{item("=", 300)}, ""},
		{[]*bgp.FlowSpecComponentItem{item(">", 10), item("&<", 20), item("=", 30)}, "11-19,30"},
		{[]*bgp.FlowSpecComponentItem{item("=", 1), item("=", 2), item("=", 3)}, "1-3"},
		{[]*bgp.FlowSpecComponentItem{item(">", 10), item("&<", 5)}, ""},
	} {
		s, err := numericSet(tc.items, 255)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.list(false); got != tc.want {
			t.Errorf("%v: got %q, want %q", tc.items, got, tc.want)
		}
	}
}

func TestBitmaskDNF(t *testing.T) {
	const syn, ack, fin = 0x02, 0x10, 0x01
	for _, tc := range []struct {
		items []*bgp.FlowSpecComponentItem
		want  []conj
	}{
		{[]*bgp.FlowSpecComponentItem{item("m", syn)}, []conj{{set: syn}}},                              // SYN set
		{[]*bgp.FlowSpecComponentItem{item("m", syn), item("&!", ack)}, []conj{{set: syn, clear: ack}}}, // SYN and not ACK
		{[]*bgp.FlowSpecComponentItem{item("", syn|ack)}, []conj{{set: syn}, {set: ack}}},               // any of
		{[]*bgp.FlowSpecComponentItem{item("!m", syn|ack)}, []conj{{clear: syn}, {clear: ack}}},         // not all of
		{[]*bgp.FlowSpecComponentItem{item("!", syn|fin)}, []conj{{clear: syn | fin}}},                  // none of
		{[]*bgp.FlowSpecComponentItem{item("m", syn), item("&!m", syn)}, nil},                           // contradiction
	} {
		got, err := bitmaskDNF(tc.items)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(tc.want) {
			t.Errorf("%v: got %v, want %v", tc.items, got, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("%v: got %v, want %v", tc.items, got, tc.want)
			}
		}
	}
}

// RFC 8955 section 5.1: lower type present first; overlapping prefixes
// longest first, disjoint lowest first; other components by bytes, a
// longer string before its own prefix.
func TestPrecedence(t *testing.T) {
	routes := map[string]Route{
		"dst 10.1/16":          {4, []bgp.FlowSpecComponentInterface{dst4("10.1.0.0/16")}, nil},
		"dst 10/8":             {4, []bgp.FlowSpecComponentInterface{dst4("10.0.0.0/8")}, nil},
		"dst 9/8":              {4, []bgp.FlowSpecComponentInterface{dst4("9.0.0.0/8")}, nil},
		"dst 10/8 proto":       {4, []bgp.FlowSpecComponentInterface{dst4("10.0.0.0/8"), comp(fsProto, item("=", 6))}, nil},
		"src 1/8":              {4, []bgp.FlowSpecComponentInterface{src4("1.0.0.0/8")}, nil},
		"proto =6":             {4, []bgp.FlowSpecComponentInterface{comp(fsProto, item("=", 6))}, nil},
		"proto =6 or =17":      {4, []bgp.FlowSpecComponentInterface{comp(fsProto, item("=", 6), item("=", 17))}, nil},
		"proto =17":            {4, []bgp.FlowSpecComponentInterface{comp(fsProto, item("=", 17))}, nil},
		"dport 80 (no prefix)": {4, []bgp.FlowSpecComponentInterface{comp(fsDstPort, item("=", 80))}, nil},
	}
	want := []string{"dst 9/8", "dst 10.1/16", "dst 10/8 proto", "dst 10/8", "src 1/8", "proto =6 or =17", "proto =6", "proto =17", "dport 80 (no prefix)"}
	var names []string
	for n := range routes {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return comparePrecedence(routes[names[i]], routes[names[j]]) < 0 })
	if strings.Join(names, "; ") != strings.Join(want, "; ") {
		t.Errorf("order:\n got  %s\n want %s", strings.Join(names, "; "), strings.Join(want, "; "))
	}
}
