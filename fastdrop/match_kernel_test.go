package fastdrop

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/xdpdrop/xdpdrop/internal/frames"
)

// Table tests of the kernel program through BPF_PROG_TEST_RUN. Every case
// also goes through the Go model, so the table pins both down; disagreements
// the differential test finds are added here.

type matchCase struct {
	name  string
	frame []byte
	want  Result
}

func kMalformed(v Action) Result       { return Result{Verdict: v, Class: ClassMalformed, Rule: -1} }
func kDefault(v Action) Result         { return Result{Verdict: v, Class: ClassDefault, Rule: -1} }
func kCompound(v Action, i int) Result { return Result{Verdict: v, Class: ClassCompound, Rule: i} }
func kPrefix(v Action, i int) Result   { return Result{Verdict: v, Class: ClassPrefix, Rule: i} }

func checkCases(t *testing.T, rules string, cases []matchCase) {
	t.Helper()
	rs := kParse(t, rules)
	opts := testOptions
	opts.DstPrefixes = CapacityFor(rs, 1).DstPrefixes
	e := newTestEngine(t, opts)
	r := mustApply(t, e, rs)
	m := NewModel(rs)
	for _, tc := range cases {
		if got := m.Eval(tc.frame); got != tc.want {
			t.Errorf("%s: model %v, want %v", tc.name, got, tc.want)
		}
		got, err := r.run(tc.frame)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if got.Result != tc.want {
			t.Errorf("%s: kernel %v, want %v (frame %x)", tc.name, got, tc.want, tc.frame)
		}
	}
}

func addrOf(s string) netip.Addr { return netip.MustParseAddr(s) }

func spec4(src, dst string, proto uint8, sport, dport uint16) frames.Spec {
	return frames.Spec{Src: addrOf(src), Dst: addrOf(dst), Proto: proto, SrcPort: sport, DstPort: dport, Payload: frames.Pattern(8)}
}

func spec6(src, dst string, proto uint8, sport, dport uint16, ext ...frames.ExtHeader) frames.Spec {
	return frames.Spec{Src: addrOf(src), Dst: addrOf(dst), Proto: proto, SrcPort: sport, DstPort: dport, IPv6Ext: ext, Payload: frames.Pattern(8)}
}

func tagged(s frames.Spec, tpids ...uint16) frames.Spec {
	for _, tp := range tpids {
		s.VLANs = append(s.VLANs, frames.VLAN{TPID: tp, ID: 42})
	}
	return s
}

func exth(typ uint8, n int) frames.ExtHeader { return frames.ExtHeader{Type: typ, Len: n} }

func frag6h(off uint16, more bool) frames.ExtHeader {
	return frames.ExtHeader{Type: frames.ProtoFragment, FragOffset: off, More: more, ID: 7}
}

// parsingRules: one rule per thing the parser extracts, so the matching
// rule tells what the parser saw; malformed frames are dropped, the rest
// passes by default.
const parsingRules = `
malformed drop
drop udp dport 7777      # 0: UDP ports at the right offset
drop tcp sport 8888      # 1: TCP ports at the right offset
pass frag                # 2: non-first fragments
drop ether arp           # 3
pass ether lldp          # 4
drop proto 47            # 5: a protocol without ports
drop icmp                # 6
drop icmpv6              # 7
pass proto 60            # 8: only after a non-first IPv6 fragment header
drop ether ipv4          # 9: any other IPv4 frame
pass ether ipv6          # 10: any other IPv6 frame
`

func TestKernelParsingEthernet(t *testing.T) {
	udp := spec4("10.0.0.1", "10.0.0.2", frames.ProtoUDP, 1, 7777)
	q, ad := frames.TPID8021Q, frames.TPID8021AD
	three := tagged(udp, q, ad, q).Build().Bytes
	checkCases(t, parsingRules, []matchCase{
		{"untagged", udp.Build().Bytes, kCompound(ActionDrop, 0)},
		{"802.1Q", tagged(udp, q).Build().Bytes, kCompound(ActionDrop, 0)},
		{"802.1ad", tagged(udp, ad).Build().Bytes, kCompound(ActionDrop, 0)},
		{"QinQ", tagged(udp, ad, q).Build().Bytes, kCompound(ActionDrop, 0)},
		{"Q in Q the other way", tagged(udp, q, ad).Build().Bytes, kCompound(ActionDrop, 0)},
		{"two 802.1Q", tagged(udp, q, q).Build().Bytes, kCompound(ActionDrop, 0)},
		{"three tags", three, kMalformed(ActionDrop)},
		{"tag cut short", tagged(udp, q).Build().Truncate(16).Bytes, kMalformed(ActionDrop)},
		{"second tag cut short", tagged(udp, q, q).Build().Truncate(20).Bytes, kMalformed(ActionDrop)},
		{"only Ethernet, IPv4 type", udp.Build().Truncate(14).Bytes, kMalformed(ActionDrop)},
		{"ARP", frames.ARPRequest("10.0.0.1", "10.0.0.2").Bytes, kCompound(ActionDrop, 3)},
		{"ARP tagged", tagged(frames.Spec{EtherType: frames.EtherTypeARP, Payload: frames.Pattern(28)}, q).Build().Bytes, kCompound(ActionDrop, 3)},
		{"LLDP", frames.Spec{EtherType: frames.EtherTypeLLDP, Payload: frames.Pattern(30)}.Build().Bytes, kCompound(ActionPass, 4)},
		{"other EtherType", frames.Spec{EtherType: 0x88b5, Payload: frames.Pattern(30)}.Build().Bytes, kDefault(ActionPass)},
		{"EtherType only, no payload", frames.Spec{EtherType: 0x88b5}.Build().Bytes, kDefault(ActionPass)},
		{"padded to 60", func() []byte { s := udp; s.PadTo = 60; return s.Build().Bytes }(), kCompound(ActionDrop, 0)},
	})
}

func TestKernelParsingIPv4(t *testing.T) {
	udp := spec4("10.0.0.1", "10.0.0.2", frames.ProtoUDP, 1, 7777)
	tcp := spec4("10.0.0.1", "10.0.0.2", frames.ProtoTCP, 8888, 80)
	f := udp.Build()
	withOpts := func(n int) frames.Spec { s := udp; s.IPv4Options = make([]byte, n); s.IPv4Options[0] = 1; return s }
	frag := func(s frames.Spec, off uint16, more bool) frames.Spec {
		s.IPv4FragOffset, s.IPv4MoreFragments = off, more
		return s
	}
	gre := spec4("10.0.0.1", "10.0.0.2", 47, 0, 0)
	checkCases(t, parsingRules, []matchCase{
		{"UDP", f.Bytes, kCompound(ActionDrop, 0)},
		{"TCP", tcp.Build().Bytes, kCompound(ActionDrop, 1)},
		{"options 4 bytes", withOpts(4).Build().Bytes, kCompound(ActionDrop, 0)},
		{"options 40 bytes", withOpts(40).Build().Bytes, kCompound(ActionDrop, 0)},
		{"GRE", gre.Build().Bytes, kCompound(ActionDrop, 5)},
		{"ICMP", spec4("10.0.0.1", "10.0.0.2", frames.ProtoICMP, 0, 0).Build().Bytes, kCompound(ActionDrop, 6)},
		{"raw protocol, no payload", func() []byte { s := spec4("10.0.0.1", "10.0.0.2", 253, 0, 0); s.Payload = nil; return s.Build().Bytes }(), kCompound(ActionDrop, 9)},
		{"version 5", f.CorruptIPVersion(5).Bytes, kMalformed(ActionDrop)},
		{"IHL 4", f.CorruptIPv4IHL(4).Bytes, kMalformed(ActionDrop)},
		{"IHL 0", f.CorruptIPv4IHL(0).Bytes, kMalformed(ActionDrop)},
		{"IHL beyond the frame", f.Truncate(f.L3 + 22).CorruptIPv4IHL(6).Bytes, kMalformed(ActionDrop)},
		{"IHL 15 beyond total length", f.CorruptIPv4IHL(15).Bytes, kMalformed(ActionDrop)},
		{"total length below IHL", f.CorruptIPv4TotalLen(19).Bytes, kMalformed(ActionDrop)},
		{"total length beyond the frame", f.CorruptIPv4TotalLen(uint16(len(f.Bytes) - f.L3 + 1)).Bytes, kMalformed(ActionDrop)},
		{"total length = header, UDP in padding", f.CorruptIPv4TotalLen(20).Bytes, kCompound(ActionDrop, 0)},
		{"header cut short", f.Truncate(f.L3 + 19).Bytes, kMalformed(ActionDrop)},
		{"UDP header cut short", f.Truncate(f.L4 + 7).Bytes, kMalformed(ActionDrop)},
		{"UDP header exactly", f.Truncate(f.L4 + 8).CorruptIPv4TotalLen(28).Bytes, kCompound(ActionDrop, 0)},
		{"TCP header cut short", tcp.Build().Truncate(14 + 20 + 19).CorruptIPv4TotalLen(39).Bytes, kMalformed(ActionDrop)},
		{"first fragment", frag(udp, 0, true).Build().Bytes, kCompound(ActionDrop, 0)},
		{"middle fragment", frag(udp, 1, true).Build().Bytes, kCompound(ActionPass, 2)},
		{"last fragment", frag(udp, 100, false).Build().Bytes, kCompound(ActionPass, 2)},
		{"largest offset", frag(udp, 0x1fff, false).Build().Bytes, kCompound(ActionPass, 2)},
		{"non-first fragment of 0 bytes", func() []byte { s := frag(udp, 3, false); s.Payload = nil; return s.Build().Bytes }(), kCompound(ActionPass, 2)},
		{"tiny first fragment", frag(udp, 0, true).Build().Truncate(f.L4 + 4).CorruptIPv4TotalLen(24).Bytes, kMalformed(ActionDrop)},
		{"don't fragment is not a fragment", func() []byte { s := udp; s.IPv4DontFragment = true; return s.Build().Bytes }(), kCompound(ActionDrop, 0)},
		{"802.1Q + options + TCP", tagged(func() frames.Spec { s := tcp; s.IPv4Options = make([]byte, 12); return s }(), frames.TPID8021Q).Build().Bytes, kCompound(ActionDrop, 1)},
	})
}

func TestKernelParsingIPv6(t *testing.T) {
	const s, d = "2001:db8::1", "2001:db8::2"
	udp := spec6(s, d, frames.ProtoUDP, 1, 7777)
	tcp := spec6(s, d, frames.ProtoTCP, 8888, 1)
	f := udp.Build()
	hbh, rt, dst, ah := exth(frames.ProtoHopByHop, 8), exth(frames.ProtoRouting, 24), exth(frames.ProtoDestOpts, 16), exth(frames.ProtoAH, 24)
	four := spec6(s, d, frames.ProtoUDP, 1, 7777, hbh, rt, dst, frag6h(0, true))
	five := spec6(s, d, frames.ProtoUDP, 1, 7777, hbh, rt, dst, ah, dst)
	checkCases(t, parsingRules, []matchCase{
		{"UDP", f.Bytes, kCompound(ActionDrop, 0)},
		{"TCP", tcp.Build().Bytes, kCompound(ActionDrop, 1)},
		{"ICMPv6", spec6(s, d, frames.ProtoICMPv6, 0, 0).Build().Bytes, kCompound(ActionDrop, 7)},
		{"no next header", func() []byte { x := spec6(s, d, frames.ProtoNoNext, 0, 0); x.Payload = nil; return x.Build().Bytes }(), kCompound(ActionPass, 10)},
		{"hop-by-hop", spec6(s, d, frames.ProtoUDP, 1, 7777, hbh).Build().Bytes, kCompound(ActionDrop, 0)},
		{"routing", spec6(s, d, frames.ProtoTCP, 8888, 1, rt).Build().Bytes, kCompound(ActionDrop, 1)},
		{"destination options", spec6(s, d, frames.ProtoUDP, 1, 7777, dst).Build().Bytes, kCompound(ActionDrop, 0)},
		{"AH", spec6(s, d, frames.ProtoUDP, 1, 7777, ah).Build().Bytes, kCompound(ActionDrop, 0)},
		{"long destination options", spec6(s, d, frames.ProtoUDP, 1, 7777, exth(frames.ProtoDestOpts, 2048)).Build().Bytes, kCompound(ActionDrop, 0)},
		{"four extension headers", four.Build().Bytes, kCompound(ActionDrop, 0)},
		{"five extension headers", five.Build().Bytes, kMalformed(ActionDrop)},
		{"first fragment", spec6(s, d, frames.ProtoUDP, 1, 7777, frag6h(0, true)).Build().Bytes, kCompound(ActionDrop, 0)},
		{"non-first fragment", spec6(s, d, frames.ProtoUDP, 1, 7777, frag6h(2, false)).Build().Bytes, kCompound(ActionPass, 2)},
		{"non-first fragment: protocol is its next header", spec6(s, d, frames.ProtoUDP, 1, 7777, frag6h(2, true), dst).Build().Bytes, kCompound(ActionPass, 2)},
		{"non-first fragment as the fourth header, then more", spec6(s, d, frames.ProtoUDP, 1, 7777, hbh, rt, dst, frag6h(9, false), dst, dst).Build().Bytes, kCompound(ActionPass, 2)},
		{"version 4 in an IPv6 EtherType", f.CorruptIPVersion(4).Bytes, kMalformed(ActionDrop)},
		{"header cut short", f.Truncate(f.L3 + 39).Bytes, kMalformed(ActionDrop)},
		{"payload length beyond the frame", f.SetUint16(f.L3+4, uint16(len(f.Bytes)-f.L3-40+1)).Bytes, kMalformed(ActionDrop)},
		{"payload length 0, UDP in padding", f.SetUint16(f.L3+4, 0).Bytes, kCompound(ActionDrop, 0)},
		{"extension header cut short", spec6(s, d, frames.ProtoUDP, 1, 7777, rt).Build().Truncate(14+40+20).SetUint16(14+4, 20).Bytes, kMalformed(ActionDrop)},
		{"extension header length byte missing", spec6(s, d, frames.ProtoUDP, 1, 7777, rt).Build().Truncate(14+40+1).SetUint16(14+4, 1).Bytes, kMalformed(ActionDrop)},
		{"fragment header cut short", spec6(s, d, frames.ProtoUDP, 1, 7777, frag6h(2, false)).Build().Truncate(14+40+7).SetUint16(14+4, 7).Bytes, kMalformed(ActionDrop)},
		{"UDP cut short after extension headers", spec6(s, d, frames.ProtoUDP, 1, 7777, hbh, dst).Build().Truncate(14+40+24+7).SetUint16(14+4, 31).Bytes, kMalformed(ActionDrop)},
		{"QinQ IPv6 TCP with AH", tagged(spec6(s, d, frames.ProtoTCP, 8888, 1, ah), frames.TPID8021AD, frames.TPID8021Q).Build().Bytes, kCompound(ActionDrop, 1)},
	})
}

func TestKernelMatchFields(t *testing.T) {
	rules := `
drop src 10.1.0.0/16 dst 10.2.3.0/24      # 0
drop udp sport 100-200                    # 1
drop tcp dport 1000-1000                  # 2
drop udp dport 60000-65535                # 3
drop proto 132                            # 4
drop src 2001:db8:a::/48 dst 2001:db8:b::1/128   # 5
drop tcp src ::/0 dport 22                # 6
drop ether ipv6 udp dport 5353            # 7
drop src 0.0.0.0/0 tcp dport 23           # 8
drop frag src 10.5.0.0/16                 # 9
drop dst 10.7.7.7                         # 10
drop src 2001:db8:c::/47 udp              # 11
`
	u4 := func(src, dst string, sp, dp uint16) []byte {
		return spec4(src, dst, frames.ProtoUDP, sp, dp).Build().Bytes
	}
	t4 := func(src, dst string, sp, dp uint16) []byte {
		return spec4(src, dst, frames.ProtoTCP, sp, dp).Build().Bytes
	}
	u6 := func(src, dst string, sp, dp uint16) []byte {
		return spec6(src, dst, frames.ProtoUDP, sp, dp).Build().Bytes
	}
	t6 := func(src, dst string, sp, dp uint16) []byte {
		return spec6(src, dst, frames.ProtoTCP, sp, dp).Build().Bytes
	}
	nonFirst := func(src string) []byte {
		s := spec4(src, "10.0.0.9", frames.ProtoUDP, 1, 2)
		s.IPv4FragOffset = 8
		return s.Build().Bytes
	}
	checkCases(t, rules, []matchCase{
		{"src and dst in", u4("10.1.200.3", "10.2.3.255", 1, 2), kCompound(ActionDrop, 0)},
		{"src out", u4("10.0.200.3", "10.2.3.4", 1, 2), kDefault(ActionPass)},
		{"dst out", u4("10.1.200.3", "10.2.4.0", 1, 2), kDefault(ActionPass)},
		{"sport low edge", u4("192.0.2.1", "192.0.2.2", 100, 2), kCompound(ActionDrop, 1)},
		{"sport high edge", u4("192.0.2.1", "192.0.2.2", 200, 2), kCompound(ActionDrop, 1)},
		{"sport below", u4("192.0.2.1", "192.0.2.2", 99, 2), kDefault(ActionPass)},
		{"sport above", u4("192.0.2.1", "192.0.2.2", 201, 2), kDefault(ActionPass)},
		{"sport range is udp only", t4("192.0.2.1", "192.0.2.2", 150, 2), kDefault(ActionPass)},
		{"dport single", t4("192.0.2.1", "192.0.2.2", 5, 1000), kCompound(ActionDrop, 2)},
		{"dport single +1", t4("192.0.2.1", "192.0.2.2", 5, 1001), kDefault(ActionPass)},
		{"dport to 65535", u4("192.0.2.1", "192.0.2.2", 5, 65535), kCompound(ActionDrop, 3)},
		{"dport 59999", u4("192.0.2.1", "192.0.2.2", 5, 59999), kDefault(ActionPass)},
		{"proto 132", spec4("192.0.2.1", "192.0.2.2", 132, 0, 0).Build().Bytes, kCompound(ActionDrop, 4)},
		{"proto 132 over IPv6", spec6("2001:db8::1", "2001:db8::2", 132, 0, 0).Build().Bytes, kCompound(ActionDrop, 4)},
		{"v6 src and dst", u6("2001:db8:a:ffff::1", "2001:db8:b::1", 1, 2), kCompound(ActionDrop, 5)},
		{"v6 dst /128 off by one", u6("2001:db8:a:ffff::1", "2001:db8:b::2", 1, 2), kDefault(ActionPass)},
		{"::/0 matches any IPv6", t6("fe80::1", "ff02::1", 1, 22), kCompound(ActionDrop, 6)},
		{"::/0 never matches IPv4", t4("192.0.2.1", "192.0.2.2", 1, 22), kDefault(ActionPass)},
		{"ether ipv6 with udp", u6("fe80::1", "ff02::fb", 5353, 5353), kCompound(ActionDrop, 7)},
		{"ether ipv6 never IPv4", u4("192.0.2.1", "224.0.0.251", 5353, 5353), kDefault(ActionPass)},
		{"0.0.0.0/0 tcp 23", t4("1.2.3.4", "5.6.7.8", 1, 23), kCompound(ActionDrop, 8)},
		{"0.0.0.0/0 never IPv6", t6("2001:db8::1", "2001:db8::2", 1, 23), kDefault(ActionPass)},
		{"frag with src", nonFirst("10.5.1.1"), kCompound(ActionDrop, 9)},
		{"frag other src", nonFirst("10.6.1.1"), kDefault(ActionPass)},
		{"first fragment is not frag", func() []byte {
			s := spec4("10.5.1.1", "10.0.0.9", frames.ProtoUDP, 1, 2)
			s.IPv4MoreFragments = true
			return s.Build().Bytes
		}(), kDefault(ActionPass)},
		{"ports never match a non-first fragment", func() []byte {
			s := spec4("192.0.2.1", "192.0.2.2", frames.ProtoUDP, 150, 2)
			s.IPv4FragOffset = 1
			return s.Build().Bytes
		}(), kDefault(ActionPass)},
		{"dst host", spec4("192.0.2.1", "10.7.7.7", 47, 0, 0).Build().Bytes, kPrefix(ActionDrop, 10)}, // a destination prefix rule,
		{"/47 in", u6("2001:db8:d:1::1", "2001:db8::2", 1, 2), kCompound(ActionDrop, 11)},
		{"/47 out", u6("2001:db8:e::1", "2001:db8::2", 1, 2), kDefault(ActionPass)},
		{"non-IP never matches an IP rule", frames.ARPRequest("10.1.0.1", "10.2.3.4").Bytes, kDefault(ActionPass)},
	})
}

func TestKernelPriorities(t *testing.T) {
	rules := `
policy drop
pass udp dport 53                 # 0
drop udp dport 53 src 10.0.0.0/8  # 1: never, rule 0 comes first
drop src 10.0.0.0/8               # 2
pass src 10.1.0.0/16              # 3
drop src 10.1.2.0/24              # 4
pass src 10.1.2.3/32              # 5
drop udp src 10.1.2.3             # 6: compound, so before every prefix rule
pass src 2001:db8::/32            # 7
drop src 2001:db8:1::/48          # 8
pass src 2001:db8:1:2::/64        # 9
drop src 2001:db8:1:2::3          # 10
pass src ::/0                     # 11
`
	u4 := func(src string, dp uint16) []byte {
		return spec4(src, "192.0.2.1", frames.ProtoUDP, 1, dp).Build().Bytes
	}
	g4 := func(src string) []byte { return spec4(src, "192.0.2.1", 47, 0, 0).Build().Bytes }
	g6 := func(src string) []byte { return spec6(src, "2001:db8::ff", 47, 0, 0).Build().Bytes }
	checkCases(t, rules, []matchCase{
		{"first compound wins", u4("10.9.9.9", 53), kCompound(ActionPass, 0)},
		{"compound before prefix", u4("10.1.2.3", 80), kCompound(ActionDrop, 6)},
		{"/8", g4("10.200.0.1"), kPrefix(ActionDrop, 2)},
		{"/16", g4("10.1.200.1"), kPrefix(ActionPass, 3)},
		{"/24", g4("10.1.2.200"), kPrefix(ActionDrop, 4)},
		{"/32", g4("10.1.2.3"), kPrefix(ActionPass, 5)},
		{"no prefix: policy drop", g4("11.0.0.1"), kDefault(ActionDrop)},
		{"v6 /32", g6("2001:db8:ffff::1"), kPrefix(ActionPass, 7)},
		{"v6 /48", g6("2001:db8:1:ffff::1"), kPrefix(ActionDrop, 8)},
		{"v6 /64", g6("2001:db8:1:2:ffff::1"), kPrefix(ActionPass, 9)},
		{"v6 /128", g6("2001:db8:1:2::3"), kPrefix(ActionDrop, 10)},
		{"v6 ::/0", g6("fe80::1"), kPrefix(ActionPass, 11)},
		{"non-IP: policy", frames.ARPRequest("10.1.2.3", "10.0.0.1").Bytes, kDefault(ActionDrop)},
	})
}

func TestKernelPolicies(t *testing.T) {
	udp := spec4("10.0.0.1", "10.0.0.2", frames.ProtoUDP, 1, 2).Build()
	bad := udp.CorruptIPv4IHL(3).Bytes
	for _, tc := range []struct {
		rules         string
		plain, broken Result
	}{
		{"", kDefault(ActionPass), kMalformed(ActionPass)},
		{"policy drop", kDefault(ActionDrop), kMalformed(ActionPass)},
		{"malformed drop", kDefault(ActionPass), kMalformed(ActionDrop)},
		{"policy drop\nmalformed drop", kDefault(ActionDrop), kMalformed(ActionDrop)},
		{"policy pass\nmalformed pass\npass udp", kCompound(ActionPass, 0), kMalformed(ActionPass)},
	} {
		t.Run(tc.rules, func(t *testing.T) {
			checkCases(t, tc.rules, []matchCase{{"plain", udp.Bytes, tc.plain}, {"malformed", bad, tc.broken}})
		})
	}
}

// TestKernelEveryPosition: the first matching rule is found at every
// position of the rule bitmaps (one word up to 64 rules, four above), with
// a later rule matching too.
func TestKernelEveryPosition(t *testing.T) {
	for _, n := range []int{64, 256} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			var rules strings.Builder
			act := func(i int) Action { return Action(1 + i%2) }
			for i := range n - 1 {
				fmt.Fprintf(&rules, "%s udp dport %d\n", act(i), 1000+i)
			}
			rules.WriteString("pass udp\n")
			var cases []matchCase
			for i := range n - 1 {
				f := spec4("10.0.0.1", "10.0.0.2", frames.ProtoUDP, 7, uint16(1000+i)).Build()
				cases = append(cases, matchCase{fmt.Sprintf("dport %d", 1000+i), f.Bytes, kCompound(act(i), i)})
			}
			f := spec4("10.0.0.1", "10.0.0.2", frames.ProtoUDP, 7, 999).Build()
			cases = append(cases, matchCase{"only the last", f.Bytes, kCompound(ActionPass, n-1)})
			checkCases(t, rules.String(), cases)
		})
	}
}

// TestKernelIPv6FragProto: "frag proto 60" with an IPv6 prefix (accepted,
// as docs/RULES.md describes) matches the non-first fragments whose
// fragment header says destination options follow, and nothing else.
func TestKernelIPv6FragProto(t *testing.T) {
	const s, d = "2001:db8::1", "2001:db8::2"
	dst := exth(frames.ProtoDestOpts, 16)
	checkCases(t, "drop frag proto 60 src 2001:db8::/32\n", []matchCase{
		{"non-first fragment, then destination options", spec6(s, d, frames.ProtoUDP, 1, 2, frag6h(2, true), dst).Build().Bytes, kCompound(ActionDrop, 0)},
		{"non-first fragment, then UDP", spec6(s, d, frames.ProtoUDP, 1, 2, frag6h(2, true)).Build().Bytes, kDefault(ActionPass)},
		{"first fragment, then destination options", spec6(s, d, frames.ProtoUDP, 1, 2, frag6h(0, true), dst).Build().Bytes, kDefault(ActionPass)},
		{"destination options, not fragmented", spec6(s, d, frames.ProtoUDP, 1, 2, dst).Build().Bytes, kDefault(ActionPass)},
		{"another source", spec6("2001:db9::1", d, frames.ProtoUDP, 1, 2, frag6h(2, true), dst).Build().Bytes, kDefault(ActionPass)},
	})
}
