package fastdrop

import (
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"

	"github.com/xdpdrop/xdpdrop/internal/frames"
)

func mustParse(t testing.TB, text string) *RuleSet {
	t.Helper()
	rs, err := Parse(strings.NewReader(text), "test.rules")
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

var (
	addr = netip.MustParseAddr
	udp  = frames.UDP4("10.1.2.3", "192.0.2.1", 1234, 53, 16)
)

func v4(src, dst string, proto uint8, sport, dport uint16) frames.Spec {
	return frames.Spec{Src: addr(src), Dst: addr(dst), Proto: proto, SrcPort: sport, DstPort: dport, Payload: frames.Pattern(16)}
}

func v6(src, dst string, proto uint8, sport, dport uint16, ext ...frames.ExtHeader) frames.Spec {
	return frames.Spec{Src: addr(src), Dst: addr(dst), Proto: proto, SrcPort: sport, DstPort: dport, Payload: frames.Pattern(16), IPv6Ext: ext}
}

func withVLANs(s frames.Spec, tpids ...uint16) frames.Spec {
	for i, tp := range tpids {
		s.VLANs = append(s.VLANs, frames.VLAN{TPID: tp, ID: uint16(100 + i)})
	}
	return s
}

func ipv4Frag(s frames.Spec, offset uint16, more bool) frames.Spec {
	s.IPv4FragOffset, s.IPv4MoreFragments = offset, more
	return s
}

func ext(typ uint8, n int) frames.ExtHeader { return frames.ExtHeader{Type: typ, Len: n} }

func frag6(offset uint16, more bool) frames.ExtHeader {
	return frames.ExtHeader{Type: frames.ProtoFragment, FragOffset: offset, More: more, ID: 7}
}

func nonIP(etherType uint16, payload int, tpids ...uint16) frames.Spec {
	return withVLANs(frames.Spec{EtherType: etherType, Payload: frames.Pattern(payload)}, tpids...)
}

// Results, for brevity in the tables.
func malformed(v Action) Result { return Result{Verdict: v, Class: ClassMalformed, Rule: -1} }
func byDefault(v Action) Result { return Result{Verdict: v, Class: ClassDefault, Rule: -1} }
func byCompound(v Action, rule int) Result {
	return Result{Verdict: v, Class: ClassCompound, Rule: rule}
}
func byPrefix(v Action, rule int) Result { return Result{Verdict: v, Class: ClassPrefix, Rule: rule} }

// frameParsingRules has one rule per thing the frame parser extracts, so the
// rule a frame matches says what the parser saw. Policy and malformed are
// both pass: the Class tells a malformed frame from an unmatched one.
const frameParsingRules = `
drop dport 7777 udp     # 0: UDP ports read at the right offset
drop tcp sport 8888     # 1: TCP ports read at the right offset
drop frag               # 2: non-first fragments
drop ether arp          # 3
drop ether 0x1234       # 4
drop proto 47           # 5: GRE, a protocol without ports
drop icmp               # 6
drop icmpv6             # 7
drop proto 60           # 8: only after a non-first IPv6 fragment header
drop ether ipv4         # 9: any other IPv4 frame
drop ether ipv6         # 10: any other IPv6 frame
`

func TestModelFrameParsing(t *testing.T) {
	m := NewModel(mustParse(t, frameParsingRules))
	udp4 := v4("10.0.0.1", "10.0.0.2", frames.ProtoUDP, 1, 7777)
	tcp4 := v4("10.0.0.1", "10.0.0.2", frames.ProtoTCP, 8888, 1)
	udp6 := v6("2001:db8::1", "2001:db8::2", frames.ProtoUDP, 1, 7777)
	tcp6 := v6("2001:db8::1", "2001:db8::2", frames.ProtoTCP, 8888, 1)
	// A UDP frame whose ports do not match: ether ipv4 / ipv6 catches it.
	other4 := v4("10.0.0.1", "10.0.0.2", frames.ProtoUDP, 1, 2)
	other6 := v6("2001:db8::1", "2001:db8::2", frames.ProtoUDP, 1, 2)
	bad := malformed(ActionPass)

	for _, tc := range []struct {
		name  string
		frame []byte
		want  Result
	}{
		// Ethernet.
		{"empty", nil, bad},
		{"13 bytes", make([]byte, 13), bad},
		{"14 bytes, EtherType 0", make([]byte, 14), byDefault(ActionPass)},
		{"14 bytes, EtherType 0x1234", nonIP(0x1234, 0).Build().Bytes, byCompound(ActionDrop, 4)},
		{"ARP", frames.ARPRequest("10.0.0.1", "10.0.0.2").Bytes, byCompound(ActionDrop, 3)},
		{"LLDP", nonIP(frames.EtherTypeLLDP, 20).Build().Bytes, byDefault(ActionPass)},

		// VLAN tags.
		{"802.1Q UDP", withVLANs(udp4, frames.TPID8021Q).Build().Bytes, byCompound(ActionDrop, 0)},
		{"802.1ad UDP", withVLANs(udp4, frames.TPID8021AD).Build().Bytes, byCompound(ActionDrop, 0)},
		{"QinQ UDP", withVLANs(udp4, frames.TPID8021AD, frames.TPID8021Q).Build().Bytes, byCompound(ActionDrop, 0)},
		{"two 802.1Q tags, TCP6", withVLANs(tcp6, frames.TPID8021Q, frames.TPID8021Q).Build().Bytes, byCompound(ActionDrop, 1)},
		{"tags in the other order, ARP", nonIP(frames.EtherTypeARP, 28, frames.TPID8021Q, frames.TPID8021AD).Build().Bytes, byCompound(ActionDrop, 3)},
		{"tag then EtherType and nothing else", nonIP(0x1234, 0, frames.TPID8021Q).Build().Bytes, byCompound(ActionDrop, 4)},
		{"three tags", withVLANs(udp4, frames.TPID8021Q, frames.TPID8021Q, frames.TPID8021Q).Build().Bytes, bad},
		{"three tags, non-IP", nonIP(0x1234, 10, frames.TPID8021AD, frames.TPID8021Q, frames.TPID8021AD).Build().Bytes, bad},
		{"tag cut short", nonIP(0x1234, 0, frames.TPID8021Q).Build().Truncate(17).Bytes, bad},
		{"second tag cut short", nonIP(0x1234, 0, frames.TPID8021Q, frames.TPID8021Q).Build().Truncate(21).Bytes, bad},

		// IPv4 header.
		{"IPv4 UDP", udp4.Build().Bytes, byCompound(ActionDrop, 0)},
		{"IPv4 other UDP", other4.Build().Bytes, byCompound(ActionDrop, 9)},
		{"IPv4 TCP", tcp4.Build().Bytes, byCompound(ActionDrop, 1)},
		{"IPv4 header cut at 19 bytes", udp4.Build().Truncate(14 + 19).Bytes, bad},
		{"IPv4 header only, total length cut", udp4.Build().Truncate(14 + 20).Bytes, bad},
		{"IPv4 version 5", udp4.Build().CorruptIPVersion(5).Bytes, bad},
		{"IPv4 version 6 under EtherType IPv4", udp4.Build().CorruptIPVersion(6).Bytes, bad},
		{"IPv4 IHL 4", udp4.Build().CorruptIPv4IHL(4).Bytes, bad},
		{"IPv4 IHL 0", udp4.Build().CorruptIPv4IHL(0).Bytes, bad},
		{"IPv4 IHL 15 past the frame", v4("10.0.0.1", "10.0.0.2", 47, 0, 0).Build().Truncate(14 + 40).CorruptIPv4IHL(15).Bytes, bad},
		{"IPv4 total length < IHL*4", udp4.Build().CorruptIPv4TotalLen(19).Bytes, bad},
		{"IPv4 total length past the frame", udp4.Build().CorruptIPv4TotalLen(20 + 8 + 16 + 1).Bytes, bad},
		{"IPv4 total length = header only, padding after", func() []byte {
			f := frames.Spec{Src: addr("10.0.0.1"), Dst: addr("10.0.0.2"), Proto: 47, PadTo: 60}.Build()
			return f.Bytes
		}(), byCompound(ActionDrop, 5)},
		{"IPv4 UDP with padding to 60", func() []byte { s := udp4; s.Payload = nil; s.PadTo = 60; return s.Build().Bytes }(), byCompound(ActionDrop, 0)},
		{"IPv4 options, ports after them", func() []byte { s := udp4; s.IPv4Options = []byte{1, 1, 1, 1, 1, 1, 1, 1}; return s.Build().Bytes }(), byCompound(ActionDrop, 0)},
		{"IPv4 40 bytes of options", func() []byte { s := tcp4; s.IPv4Options = make([]byte, 40); return s.Build().Bytes }(), byCompound(ActionDrop, 1)},
		{"IPv4 ICMP", frames.Spec{Src: addr("10.0.0.1"), Dst: addr("10.0.0.2"), Proto: frames.ProtoICMP, ICMPType: 8}.Build().Bytes, byCompound(ActionDrop, 6)},
		{"IPv4 ICMP with no ICMP header", frames.Spec{Src: addr("10.0.0.1"), Dst: addr("10.0.0.2"), Proto: frames.ProtoICMP}.Build().Truncate(34).Bytes, bad}, // total length says 28
		{"IPv4 GRE, no L4 bytes at all", frames.Spec{Src: addr("10.0.0.1"), Dst: addr("10.0.0.2"), Proto: 47}.Build().Bytes, byCompound(ActionDrop, 5)},

		// L4 headers.
		{"UDP header 7 bytes", udp4.Build().Truncate(14 + 20 + 7).CorruptIPv4TotalLen(27).Bytes, bad},
		{"UDP header 8 bytes", func() []byte { s := udp4; s.Payload = nil; return s.Build().Bytes }(), byCompound(ActionDrop, 0)},
		{"TCP header 19 bytes", tcp4.Build().Truncate(14 + 20 + 19).CorruptIPv4TotalLen(39).Bytes, bad},
		{"TCP header 20 bytes", func() []byte { s := tcp4; s.Payload = nil; return s.Build().Bytes }(), byCompound(ActionDrop, 1)},
		// Counted against the frame, not the total length: a UDP header
		// in the Ethernet padding after a 20-byte IPv4 packet is read.
		{"UDP header in the padding", func() []byte {
			f := udp4.Build()
			return f.CorruptIPv4TotalLen(20).Bytes
		}(), byCompound(ActionDrop, 0)},

		// IPv4 fragments.
		{"IPv4 first fragment", ipv4Frag(udp4, 0, true).Build().Bytes, byCompound(ActionDrop, 0)},
		{"IPv4 non-first fragment", ipv4Frag(udp4, 100, false).Build().Bytes, byCompound(ActionDrop, 2)},
		{"IPv4 non-first fragment, more follow", ipv4Frag(tcp4, 1, true).Build().Bytes, byCompound(ActionDrop, 2)},
		{"IPv4 non-first fragment, no payload", func() []byte { s := ipv4Frag(udp4, 8191, false); s.Payload = nil; return s.Build().Bytes }(), byCompound(ActionDrop, 2)},
		{"IPv4 tiny first fragment", func() []byte {
			s := ipv4Frag(udp4, 0, true)
			return s.Build().Truncate(14 + 20 + 4).CorruptIPv4TotalLen(24).Bytes
		}(), bad},
		{"IPv4 DF set", func() []byte { s := udp4; s.IPv4DontFragment = true; return s.Build().Bytes }(), byCompound(ActionDrop, 0)},

		// IPv6 header.
		{"IPv6 UDP", udp6.Build().Bytes, byCompound(ActionDrop, 0)},
		{"IPv6 other UDP", other6.Build().Bytes, byCompound(ActionDrop, 10)},
		{"IPv6 TCP", tcp6.Build().Bytes, byCompound(ActionDrop, 1)},
		{"IPv6 ICMPv6", frames.Spec{Src: addr("2001:db8::1"), Dst: addr("2001:db8::2"), Proto: frames.ProtoICMPv6, ICMPType: 128}.Build().Bytes, byCompound(ActionDrop, 7)},
		{"IPv6 header cut at 39 bytes", udp6.Build().Truncate(14 + 39).Bytes, bad},
		{"IPv6 version 4", udp6.Build().CorruptIPVersion(4).Bytes, bad},
		{"IPv6 payload length past the frame", udp6.Build().SetUint16(14+4, 8+16+1).Bytes, bad},
		{"IPv6 payload length 0, UDP header in the padding", udp6.Build().SetUint16(14+4, 0).Bytes, byCompound(ActionDrop, 0)},
		{"IPv6 with padding", func() []byte { s := udp6; s.PadTo = 200; return s.Build().Bytes }(), byCompound(ActionDrop, 0)},
		{"IPv6 UDP header 7 bytes", udp6.Build().Truncate(14+40+7).SetUint16(14+4, 7).Bytes, bad},
		{"IPv6 TCP header 19 bytes", tcp6.Build().Truncate(14+40+19).SetUint16(14+4, 19).Bytes, bad},
		{"IPv6 no next header", v6("2001:db8::1", "2001:db8::2", frames.ProtoNoNext, 0, 0).Build().Bytes, byCompound(ActionDrop, 10)},

		// IPv6 extension headers.
		{"hop-by-hop, UDP", v6("2001:db8::1", "2001:db8::2", frames.ProtoUDP, 1, 7777, ext(frames.ProtoHopByHop, 8)).Build().Bytes, byCompound(ActionDrop, 0)},
		{"routing 24 bytes, TCP", v6("2001:db8::1", "2001:db8::2", frames.ProtoTCP, 8888, 1, ext(frames.ProtoRouting, 24)).Build().Bytes, byCompound(ActionDrop, 1)},
		{"destination options 64 bytes, UDP", v6("2001:db8::1", "2001:db8::2", frames.ProtoUDP, 1, 7777, ext(frames.ProtoDestOpts, 64)).Build().Bytes, byCompound(ActionDrop, 0)},
		{"AH 24 bytes, UDP", v6("2001:db8::1", "2001:db8::2", frames.ProtoUDP, 1, 7777, ext(frames.ProtoAH, 24)).Build().Bytes, byCompound(ActionDrop, 0)},
		{"AH, GRE", v6("2001:db8::1", "2001:db8::2", 47, 0, 0, ext(frames.ProtoAH, 16)).Build().Bytes, byCompound(ActionDrop, 5)},
		{"four extension headers, UDP", v6("2001:db8::1", "2001:db8::2", frames.ProtoUDP, 1, 7777,
			ext(frames.ProtoHopByHop, 8), ext(frames.ProtoRouting, 16), ext(frames.ProtoAH, 16), ext(frames.ProtoDestOpts, 8)).Build().Bytes, byCompound(ActionDrop, 0)},
		{"four extension headers with a first fragment, TCP", v6("2001:db8::1", "2001:db8::2", frames.ProtoTCP, 8888, 1,
			ext(frames.ProtoHopByHop, 8), ext(frames.ProtoDestOpts, 8), frag6(0, true), ext(frames.ProtoDestOpts, 8)).Build().Bytes, byCompound(ActionDrop, 1)},
		{"five extension headers", v6("2001:db8::1", "2001:db8::2", frames.ProtoUDP, 1, 7777,
			ext(frames.ProtoHopByHop, 8), ext(frames.ProtoRouting, 16), ext(frames.ProtoAH, 16), ext(frames.ProtoDestOpts, 8), ext(frames.ProtoDestOpts, 8)).Build().Bytes, bad},
		{"five extension headers, non-IP protocol", v6("2001:db8::1", "2001:db8::2", frames.ProtoNoNext, 0, 0,
			ext(0, 8), ext(60, 8), ext(60, 8), ext(60, 8), ext(60, 8)).Build().Bytes, bad},
		{"extension header cut short", v6("2001:db8::1", "2001:db8::2", 47, 0, 0, ext(frames.ProtoDestOpts, 16)).Build().Truncate(14+40+15).SetUint16(14+4, 15).Bytes, bad},
		{"extension header length byte missing", v6("2001:db8::1", "2001:db8::2", 47, 0, 0, ext(frames.ProtoDestOpts, 8)).Build().Truncate(14+40+1).SetUint16(14+4, 1).Bytes, bad},
		{"AH cut short", v6("2001:db8::1", "2001:db8::2", 47, 0, 0, ext(frames.ProtoAH, 24)).Build().Truncate(14+40+23).SetUint16(14+4, 23).Bytes, bad},
		{"fragment header cut short", v6("2001:db8::1", "2001:db8::2", 47, 0, 0, frag6(0, true)).Build().Truncate(14+40+7).SetUint16(14+4, 7).Bytes, bad},
		{"UDP cut after an extension header", v6("2001:db8::1", "2001:db8::2", frames.ProtoUDP, 1, 7777, ext(0, 8)).Build().Truncate(14+40+8+7).SetUint16(14+4, 15).Bytes, bad},

		// IPv6 fragments.
		{"IPv6 first fragment", v6("2001:db8::1", "2001:db8::2", frames.ProtoUDP, 1, 7777, frag6(0, true)).Build().Bytes, byCompound(ActionDrop, 0)},
		{"IPv6 atomic fragment", v6("2001:db8::1", "2001:db8::2", frames.ProtoUDP, 1, 7777, frag6(0, false)).Build().Bytes, byCompound(ActionDrop, 0)},
		{"IPv6 non-first fragment", v6("2001:db8::1", "2001:db8::2", frames.ProtoUDP, 1, 7777, frag6(10, true)).Build().Bytes, byCompound(ActionDrop, 2)},
		{"IPv6 non-first fragment after three headers", v6("2001:db8::1", "2001:db8::2", frames.ProtoUDP, 1, 7777,
			ext(0, 8), ext(43, 8), ext(60, 8), frag6(10, false)).Build().Bytes, byCompound(ActionDrop, 2)},
		{"IPv6 tiny first fragment", v6("2001:db8::1", "2001:db8::2", frames.ProtoTCP, 8888, 1, frag6(0, true)).Build().Truncate(14+40+8+10).SetUint16(14+4, 18).Bytes, bad},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := m.Eval(tc.frame); got != tc.want {
				t.Errorf("Eval = %+v, want %+v\nframe % x", got, tc.want, tc.frame)
			}
		})
	}
}

// TestModelIPv6FragmentStops: what follows a non-first fragment header is
// fragment data, never headers (Amendments in FASTDROP-SPEC.md).
func TestModelIPv6FragmentStops(t *testing.T) {
	rs := mustParse(t, "drop proto 60\ndrop udp\npass frag")
	m := NewModel(rs)
	// The fragment header says "destination options follow" in a non-first
	// fragment: proto is 60, nothing after it is read.
	f := v6("2001:db8::1", "2001:db8::2", frames.ProtoUDP, 1, 2, frag6(10, false), ext(60, 8)).Build()
	if got, want := m.Eval(f.Bytes), byCompound(ActionDrop, 0); got != want {
		t.Errorf("non-first fragment, then 60: %+v, want %+v", got, want)
	}
	// Fragment data that would be a fifth header, or cut short, is not
	// malformed: it is never parsed.
	f = v6("2001:db8::1", "2001:db8::2", 60, 0, 0, ext(0, 8), ext(0, 8), ext(0, 8), frag6(1, false)).Build()
	f = f.Truncate(f.Len()) // no bytes after the fragment header at all
	if got, want := m.Eval(f.Bytes), byCompound(ActionDrop, 0); got != want {
		t.Errorf("fourth header is a non-first fragment with next header 60: %+v, want %+v", got, want)
	}
	// proto 60 in an unfragmented packet never matches: 60 is skipped.
	f = v6("2001:db8::1", "2001:db8::2", frames.ProtoUDP, 1, 2, ext(60, 8)).Build()
	if got, want := m.Eval(f.Bytes), byCompound(ActionDrop, 1); got != want {
		t.Errorf("destination options then UDP: %+v, want %+v", got, want)
	}
}

func TestModelMatching(t *testing.T) {
	const rules = `
policy drop
malformed drop
pass udp dport 1000-2000                # 0
pass tcp sport 53                       # 1
redirect proto 132 dst 192.0.2.0/24     # 2
pass src 2001:db8::/32 dst 2001:db8::/32 # 3
pass dst 198.51.100.7                   # 4
pass ether arp                          # 5
pass icmp src 0.0.0.0/0                 # 6
pass frag src 203.0.113.0/24            # 7
drop src 10.0.0.0/8                     # 8  prefix rules
pass src 10.1.0.0/16                    # 9
drop src 10.1.2.0/24                    # 10
pass src 10.1.2.3                       # 11
pass src 2001:db8:1::/48                # 12
drop src ::/0                           # 13
`
	m := NewModel(mustParse(t, rules))
	for _, tc := range []struct {
		name  string
		frame frames.Frame
		want  Result
	}{
		{"dport below the range", frames.UDP4("172.16.0.1", "172.16.0.2", 1, 999, 0), byDefault(ActionDrop)},
		{"dport at the range start", frames.UDP4("172.16.0.1", "172.16.0.2", 1, 1000, 0), byCompound(ActionPass, 0)},
		{"dport at the range end", frames.UDP4("172.16.0.1", "172.16.0.2", 1, 2000, 0), byCompound(ActionPass, 0)},
		{"dport above the range", frames.UDP4("172.16.0.1", "172.16.0.2", 1, 2001, 0), byDefault(ActionDrop)},
		{"dport range is udp only", frames.TCP4("172.16.0.1", "172.16.0.2", 1, 1500, 0), byDefault(ActionDrop)},
		{"dport range over IPv6", frames.UDP6("2001:db9::1", "2001:db9::2", 1, 1500, 0), byCompound(ActionPass, 0)},
		{"tcp sport", frames.TCP4("172.16.0.1", "172.16.0.2", 53, 1, 0), byCompound(ActionPass, 1)},
		{"tcp sport is not dport", frames.TCP4("172.16.0.1", "172.16.0.2", 1, 53, 0), byDefault(ActionDrop)},
		{"udp sport 53 is not tcp", frames.UDP4("172.16.0.1", "172.16.0.2", 53, 1, 0), byDefault(ActionDrop)},
		{"proto number and dst", v4("172.16.0.1", "192.0.2.200", 132, 0, 0).Build(), byCompound(ActionRedirect, 2)},
		{"proto number, dst outside", v4("172.16.0.1", "192.0.3.1", 132, 0, 0).Build(), byDefault(ActionDrop)},
		{"src and dst", frames.UDP6("2001:db8::1", "2001:db8:ffff::1", 1, 1, 0), byCompound(ActionPass, 3)},
		{"src and dst, dst outside: the src prefix rule decides", frames.UDP6("2001:db8:1::1", "2001:db9::1", 1, 1, 0), byPrefix(ActionPass, 12)},
		{"dst host", frames.UDP4("172.16.0.1", "198.51.100.7", 1, 1, 0), byPrefix(ActionPass, 4)}, // a destination prefix rule
		{"dst host, next address", frames.UDP4("172.16.0.1", "198.51.100.8", 1, 1, 0), byDefault(ActionDrop)},
		{"ether arp", frames.ARPRequest("10.1.2.3", "10.0.0.1"), byCompound(ActionPass, 5)},
		{"non-IP frames skip prefix rules", nonIP(frames.EtherTypeLLDP, 30).Build(), byDefault(ActionDrop)},
		{"icmp with a /0 prefix", frames.Spec{Src: addr("10.1.2.3"), Dst: addr("10.0.0.1"), Proto: frames.ProtoICMP}.Build(), byCompound(ActionPass, 6)},
		{"icmp /0 is IPv4 only", frames.Spec{Src: addr("2001:db9::1"), Dst: addr("2001:db9::2"), Proto: frames.ProtoICMP}.Build(), byPrefix(ActionDrop, 13)},
		{"frag src", ipv4Frag(v4("203.0.113.9", "10.0.0.1", frames.ProtoUDP, 1, 1500), 5, false).Build(), byCompound(ActionPass, 7)},
		{"first fragment is not frag, its ports are read", ipv4Frag(v4("203.0.113.9", "10.0.0.1", frames.ProtoUDP, 1, 1500), 0, true).Build(), byCompound(ActionPass, 0)},
		{"non-first fragment has no ports", ipv4Frag(v4("10.1.2.3", "10.0.0.1", frames.ProtoUDP, 1, 1500), 5, false).Build(), byPrefix(ActionPass, 11)},

		// Longest prefix match on the source address.
		{"/8", frames.UDP4("10.200.0.1", "172.16.0.1", 1, 1, 0), byPrefix(ActionDrop, 8)},
		{"/16 inside /8", frames.UDP4("10.1.200.1", "172.16.0.1", 1, 1, 0), byPrefix(ActionPass, 9)},
		{"/24 inside /16", frames.UDP4("10.1.2.4", "172.16.0.1", 1, 1, 0), byPrefix(ActionDrop, 10)},
		{"/32 inside /24", frames.UDP4("10.1.2.3", "172.16.0.1", 1, 1, 0), byPrefix(ActionPass, 11)},
		{"dst is not looked up", frames.UDP4("172.16.0.1", "10.1.2.3", 1, 1, 0), byDefault(ActionDrop)},
		{"IPv6 /48 inside /0", frames.UDP6("2001:db8:1:2::3", "2001:db9::1", 1, 1, 0), byPrefix(ActionPass, 12)},
		{"IPv6 /0", frames.UDP6("fe80::1", "2001:db9::1", 1, 1, 0), byPrefix(ActionDrop, 13)},
		{"IPv6 /0 does not match IPv4", frames.UDP4("192.0.2.1", "172.16.0.1", 1, 1, 0), byDefault(ActionDrop)},
		{"compound rules come before prefix rules", frames.UDP4("10.200.0.1", "172.16.0.1", 1, 1234, 0), byCompound(ActionPass, 0)},

		{"malformed frames skip all rules", frames.UDP4("10.1.2.3", "10.0.0.1", 1, 1500, 0).Truncate(40), malformed(ActionDrop)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := m.Eval(tc.frame.Bytes); got != tc.want {
				t.Errorf("Eval = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestModelFirstMatchWins(t *testing.T) {
	m := NewModel(mustParse(t, "pass udp dport 53\ndrop udp\nredirect dport 53 udp\ndrop"))
	for _, tc := range []struct {
		frame frames.Frame
		want  Result
	}{
		{frames.UDP4("10.0.0.1", "10.0.0.2", 1, 53, 0), byCompound(ActionPass, 0)},
		{frames.UDP4("10.0.0.1", "10.0.0.2", 1, 54, 0), byCompound(ActionDrop, 1)},
		{frames.TCP4("10.0.0.1", "10.0.0.2", 1, 53, 0), byCompound(ActionDrop, 3)},
		{frames.ARPRequest("10.0.0.1", "10.0.0.2"), byCompound(ActionDrop, 3)}, // "drop" matches everything
	} {
		if got := m.Eval(tc.frame.Bytes); got != tc.want {
			t.Errorf("% x: Eval = %+v, want %+v", tc.frame.Bytes[:16], got, tc.want)
		}
	}
}

func TestModelDefaults(t *testing.T) {
	// A rule set built in code with zero Policy and Malformed passes.
	m := NewModel(&RuleSet{})
	if got := m.Eval(udp.Bytes); got != byDefault(ActionPass) {
		t.Errorf("zero policy: %+v", got)
	}
	if got := m.Eval(udp.Bytes[:20]); got != malformed(ActionPass) {
		t.Errorf("zero malformed: %+v", got)
	}
	m = NewModel(mustParse(t, "policy redirect"))
	if got := m.Eval(udp.Bytes); got != byDefault(ActionRedirect) {
		t.Errorf("policy redirect: %+v", got)
	}
}

// TestModelManyPrefixes checks longest-prefix match against a brute-force
// scan over many random prefixes of both families.
func TestModelManyPrefixes(t *testing.T) {
	n := 1_000_000
	lookups := 2000
	if testing.Short() {
		n, lookups = 20_000, 500
	}
	rng := rand.New(rand.NewPCG(1, 2))
	seen := make(map[netip.Prefix]bool, n)
	var ps []netip.Prefix
	for len(ps) < n {
		var a netip.Addr
		var bits int
		if rng.IntN(2) == 0 {
			a = netip.AddrFrom4([4]byte{10, byte(rng.IntN(4)), byte(rng.Uint32()), byte(rng.Uint32())})
			bits = 8 + rng.IntN(25)
		} else {
			var b [16]byte
			b[0], b[1], b[2], b[3], b[4] = 0x20, 0x01, 0x0d, 0xb8, byte(rng.IntN(4))
			for i := 5; i < 16; i++ {
				b[i] = byte(rng.Uint32())
			}
			a = netip.AddrFrom16(b)
			bits = 32 + rng.IntN(97)
		}
		p, _ := a.Prefix(bits)
		if !seen[p] {
			seen[p] = true
			ps = append(ps, p)
		}
	}
	rs := &RuleSet{Rules: PrefixRules(ActionDrop, ps)}
	for i := range rs.Rules {
		if i%2 == 1 {
			rs.Rules[i].Action = ActionPass
		}
	}
	if err := rs.Validate(); err != nil {
		t.Fatal(err)
	}
	m := NewModel(rs)
	index := make(map[netip.Prefix]int, len(ps))
	for i, p := range ps {
		index[p] = i
	}
	// Look up addresses inside random rules (so nested prefixes are hit)
	// and random addresses. The expected rule comes from trying every
	// prefix length, longest first, and for the first lookups also from a
	// scan of every rule.
	for k := range lookups {
		p := ps[rng.IntN(len(ps))]
		b := p.Addr().AsSlice()
		for i := p.Bits(); i < len(b)*8; i++ {
			if rng.IntN(2) == 1 {
				b[i/8] |= 0x80 >> (i % 8)
			}
		}
		a, _ := netip.AddrFromSlice(b)
		if k%4 == 0 {
			a = netip.AddrFrom4([4]byte{10, byte(rng.IntN(5)), byte(rng.Uint32()), byte(rng.Uint32())})
		}
		want := -1
		for bits := a.BitLen(); bits >= 0; bits-- {
			q, _ := a.Prefix(bits)
			if i, ok := index[q]; ok {
				want = i
				break
			}
		}
		if k < 10 {
			scan, best := -1, -1
			for i, q := range ps {
				if q.Contains(a) && q.Bits() > best {
					scan, best = i, q.Bits()
				}
			}
			if scan != want {
				t.Fatalf("test bug: lookup %s: scan %d, by length %d", a, scan, want)
			}
		}
		got, ok := m.longestPrefix(0, a)
		if !ok {
			got = -1
		}
		if got != want {
			t.Fatalf("lookup %s: got rule %d, want %d", a, got, want)
		}
	}
	// Through Eval, the verdict is the rule's.
	for _, i := range []int{0, 1, len(ps) - 1} {
		f := frames.Spec{Src: ps[i].Addr(), Dst: ps[i].Addr(), Proto: 47}
		if ps[i].Addr().Is4() {
			f.Dst = addr("192.0.2.1")
		} else {
			f.Dst = addr("2001:db9::1")
		}
		got := m.Eval(f.Build().Bytes)
		if got.Class != ClassPrefix || got.Verdict != rs.Rules[got.Rule].Action || !ps[got.Rule].Contains(ps[i].Addr()) {
			t.Errorf("Eval of a frame from %s = %+v", ps[i].Addr(), got)
		}
	}
}

func TestResultClassString(t *testing.T) {
	for c, want := range map[ResultClass]string{ClassMalformed: "malformed", ClassCompound: "compound", ClassPrefix: "prefix", ClassDefault: "default", 0: "ResultClass(0)"} {
		if got := c.String(); got != want {
			t.Errorf("%d: %q, want %q", c, got, want)
		}
	}
}

// TestModelRandomFramesNeverPanic runs the model over random and mutated
// frames: it must classify every byte string without panicking.
func TestModelRandomFramesNeverPanic(t *testing.T) {
	m := NewModel(mustParse(t, frameParsingRules+"\ndrop src 10.0.0.0/8\ndrop src 2001:db8::/32\n"))
	rng := rand.New(rand.NewPCG(3, 4))
	classes := map[ResultClass]int{}
	for range 5000 {
		f := frames.Random(rng).Build()
		r := m.Eval(f.Bytes)
		classes[r.Class]++
		b := frames.Mutate(rng, f)
		r = m.Eval(b)
		classes[r.Class]++
		for i := range len(b) {
			m.Eval(b[:i])
		}
	}
	for _, c := range []ResultClass{ClassMalformed, ClassCompound, ClassDefault} {
		if classes[c] == 0 {
			t.Errorf("no random frame got class %v: %v", c, classes)
		}
	}
}

// TestHeaderExtent: the bytes the parser reads end after the last header
// it reads; what follows, and the Ethernet padding, are never read.
func TestHeaderExtent(t *testing.T) {
	for _, tc := range []struct {
		name  string
		frame []byte
		want  int
	}{
		{"UDP over IPv4", frames.UDP4("192.0.2.1", "198.18.0.1", 1, 53, 100).Bytes, 14 + 20 + 8},
		{"TCP over IPv6", frames.TCP6("2001:db8::1", "2001:db8::2", 1, 22, 100).Bytes, 14 + 40 + 20},
		{"IPv4 options", frames.Spec{Src: netip.MustParseAddr("192.0.2.1"), Dst: netip.MustParseAddr("198.18.0.1"),
			IPv4Options: make([]byte, 8), Proto: frames.ProtoUDP, Payload: make([]byte, 10)}.Build().Bytes, 14 + 28 + 8},
		{"IPv6 extension header", frames.Spec{Src: netip.MustParseAddr("2001:db8::1"), Dst: netip.MustParseAddr("2001:db8::2"),
			IPv6Ext: []frames.ExtHeader{{Type: frames.ProtoHopByHop, Len: 64}}, Proto: frames.ProtoTCP}.Build().Bytes, 14 + 40 + 64 + 20},
		{"non-first fragment: no L4 header", frames.Spec{Src: netip.MustParseAddr("192.0.2.1"), Dst: netip.MustParseAddr("198.18.0.1"),
			IPv4FragOffset: 10, Proto: frames.ProtoUDP, Payload: make([]byte, 100)}.Build().Bytes, 14 + 20},
		{"VLAN-tagged ARP", frames.Spec{VLANs: []frames.VLAN{{ID: 7}}, EtherType: frames.EtherTypeARP, Payload: make([]byte, 28)}.Build().Bytes, 18},
		{"ICMP", frames.Spec{Src: netip.MustParseAddr("192.0.2.1"), Dst: netip.MustParseAddr("198.18.0.1"), Proto: frames.ProtoICMP}.Build().Bytes, 14 + 20 + 4}, // type, code, checksum
		{"UDP header cut short", frames.UDP4("192.0.2.1", "198.18.0.1", 1, 53, 0).Bytes[:40], 14 + 20},
		{"runt", make([]byte, 10), 0},
	} {
		if got := HeaderExtent(tc.frame); got != tc.want {
			t.Errorf("%s: HeaderExtent = %d, want %d", tc.name, got, tc.want)
		}
	}
}
