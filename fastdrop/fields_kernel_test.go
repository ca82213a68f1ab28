package fastdrop

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/xdpdrop/xdpdrop/internal/frames"
)

// withTTL builds s with its IPv4 TTL or IPv6 hop limit set to ttl (0
// included, which frames.Spec cannot say: its 0 means 64).
func withTTL(s frames.Spec, ttl uint8) []byte {
	f := s.Build()
	if s.Src.Is4() {
		f.Bytes[f.L3+8] = ttl
	} else {
		f.Bytes[f.L3+7] = ttl
	}
	return f.Bytes
}

// fillerRules returns n compound rules that match none of the test frames
// (protocol 253 from a benchmarking prefix), to take a rule set past 64
// compound rules, where the program reads the multi-word classifier
// (fd_compound) instead of fd_compound64.
func fillerRules(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "pass proto 253 src 198.18.%d.0/24\n", i)
	}
	return b.String()
}

// TestKernelTTL: ttl matches the IPv4 TTL and the IPv6 hop limit, a value
// or an inclusive range, of every IP frame (non-first fragments, VLAN
// tagged, with IPv6 extension headers), never a non-IP frame; alone, with
// the fields the front tables hold, and with sport, src and dst (which
// fd_compound64 otherwise reads on its fast path); with up to 64 compound
// rules and with more.
func TestKernelTTL(t *testing.T) {
	rules := `
drop udp ttl 0-2                                                     # 0
drop src 192.0.2.0/24 ttl 64                                         # 1
drop udp src 10.0.0.0/8 sport 1000-2000 dst 10.9.0.0/16 ttl 200-210  # 2
drop udp src 10.0.0.0/8 sport 1000-2000 dst 10.9.0.0/16              # 3
pass ether ipv6 ttl 255                                              # 4
drop frag ttl 7                                                      # 5
drop tcp dport 80 ttl 33                                             # 6
`
	u4 := func(src, dst string, sp, dp uint16, ttl uint8) []byte {
		return withTTL(spec4(src, dst, frames.ProtoUDP, sp, dp), ttl)
	}
	cases := []matchCase{
		{"udp ttl 0", u4("198.51.100.1", "198.51.100.2", 1, 2, 0), kCompound(ActionDrop, 0)},
		{"udp ttl 2", u4("198.51.100.1", "198.51.100.2", 1, 2, 2), kCompound(ActionDrop, 0)},
		{"udp ttl 3", u4("198.51.100.1", "198.51.100.2", 1, 2, 3), kDefault(ActionPass)},
		{"tcp ttl 1 is not udp", withTTL(spec4("198.51.100.1", "198.51.100.2", frames.ProtoTCP, 1, 2), 1), kDefault(ActionPass)},
		{"udp6 hop limit 1", withTTL(spec6("2001:db8::1", "2001:db8::2", frames.ProtoUDP, 1, 2), 1), kCompound(ActionDrop, 0)},
		{"udp6 after extension headers", withTTL(spec6("2001:db8::1", "2001:db8::2", frames.ProtoUDP, 1, 2, exth(frames.ProtoHopByHop, 0), exth(frames.ProtoDestOpts, 16)), 2), kCompound(ActionDrop, 0)},
		{"udp vlan ttl 1", withTTL(tagged(spec4("198.51.100.1", "198.51.100.2", frames.ProtoUDP, 1, 2), frames.TPID8021Q, frames.TPID8021AD), 1), kCompound(ActionDrop, 0)},
		{"src ttl 64", withTTL(spec4("192.0.2.9", "198.51.100.2", 47, 0, 0), 64), kCompound(ActionDrop, 1)},
		{"src ttl 63", withTTL(spec4("192.0.2.9", "198.51.100.2", 47, 0, 0), 63), kDefault(ActionPass)},
		{"src ttl 65", withTTL(spec4("192.0.2.9", "198.51.100.2", 47, 0, 0), 65), kDefault(ActionPass)},
		{"all four, ttl in", u4("10.1.2.3", "10.9.8.7", 1500, 9, 205), kCompound(ActionDrop, 2)},
		{"all four, ttl out: the rule without ttl", u4("10.1.2.3", "10.9.8.7", 1500, 9, 211), kCompound(ActionDrop, 3)},
		{"all four, sport out", u4("10.1.2.3", "10.9.8.7", 999, 9, 205), kDefault(ActionPass)},
		{"hop limit 255", withTTL(spec6("2001:db8::1", "2001:db8::2", 47, 0, 0), 255), kCompound(ActionPass, 4)},
		{"TTL 255 is not IPv6", withTTL(spec4("198.51.100.1", "198.51.100.2", 47, 0, 0), 255), kDefault(ActionPass)},
		{"non-first fragment ttl 7", func() []byte {
			s := spec4("198.51.100.1", "198.51.100.2", frames.ProtoUDP, 1, 2)
			s.IPv4FragOffset = 100
			return withTTL(s, 7)
		}(), kCompound(ActionDrop, 5)},
		{"non-first IPv6 fragment ttl 7", withTTL(spec6("2001:db8::1", "2001:db8::2", frames.ProtoUDP, 1, 2, frag6h(100, false)), 7), kCompound(ActionDrop, 5)},
		{"first fragment ttl 7 is not frag", func() []byte {
			s := spec4("198.51.100.1", "198.51.100.2", 47, 0, 0)
			s.IPv4MoreFragments = true
			return withTTL(s, 7)
		}(), kDefault(ActionPass)},
		{"tcp 80 ttl 33", withTTL(spec4("198.51.100.1", "198.51.100.2", frames.ProtoTCP, 5, 80), 33), kCompound(ActionDrop, 6)},
		{"tcp 80 ttl 34", withTTL(spec4("198.51.100.1", "198.51.100.2", frames.ProtoTCP, 5, 80), 34), kDefault(ActionPass)},
		{"tcp 81 ttl 33", withTTL(spec4("198.51.100.1", "198.51.100.2", frames.ProtoTCP, 5, 81), 33), kDefault(ActionPass)},
		{"ARP", frames.Spec{EtherType: frames.EtherTypeARP, Payload: frames.Pattern(28)}.Build().Bytes, kDefault(ActionPass)},
	}
	t.Run("64 rules or fewer", func(t *testing.T) { checkCases(t, rules, cases) })
	t.Run("more than 64 rules", func(t *testing.T) { checkCases(t, rules+fillerRules(70), cases) })
}

// withTCPFlags builds a TCP frame with flags byte fl (0 included, which
// frames.Spec cannot say: its 0 means SYN).
func withTCPFlags(s frames.Spec, fl uint8) []byte {
	f := s.Build()
	f.Bytes[f.L4+13] = fl
	return f.Bytes
}

// TestKernelTCPFlags: flags has FlowSpec's bitmask semantics (the named
// bits set, the ! bits clear, the others any; == the whole byte), for TCP
// over IPv4 and IPv6, tagged or with extension headers, never UDP or a
// non-first fragment; with up to 64 compound rules and with more.
func TestKernelTCPFlags(t *testing.T) {
	const (
		fin, syn, rst, psh, ack, urg, ece, cwr = 1, 2, 4, 8, 16, 32, 64, 128
	)
	rules := `
drop tcp flags syn,!ack dport 80          # 0
drop tcp flags ==syn                      # 1
drop tcp flags fin,psh,urg                # 2
pass tcp flags ==none                     # 3
drop tcp flags !syn,!rst,!ack src 2001:db8::/32  # 4
drop tcp src 10.0.0.0/8 sport 1-9 dst 10.9.0.0/16 flags rst   # 5
`
	t4 := func(dport uint16, fl uint8) []byte {
		return withTCPFlags(spec4("198.51.100.1", "198.51.100.2", frames.ProtoTCP, 5, dport), fl)
	}
	cases := []matchCase{
		{"syn to 80", t4(80, syn), kCompound(ActionDrop, 0)},
		{"syn+ece+cwr to 80 (other bits any)", t4(80, syn|ece|cwr), kCompound(ActionDrop, 0)},
		{"syn+ack to 80", t4(80, syn|ack), kDefault(ActionPass)},
		{"syn to 81: exactly syn", t4(81, syn), kCompound(ActionDrop, 1)},
		{"syn+ece to 81: not exactly syn", t4(81, syn|ece), kDefault(ActionPass)},
		{"xmas", t4(81, fin|psh|urg), kCompound(ActionDrop, 2)},
		{"xmas and more", t4(81, 0xff), kCompound(ActionDrop, 2)},
		{"fin+psh only", t4(81, fin|psh), kDefault(ActionPass)},
		{"null scan", t4(81, 0), kCompound(ActionPass, 3)},
		{"IPv6 ack only", withTCPFlags(spec6("2001:db8::1", "2001:db8:1::1", frames.ProtoTCP, 5, 81), fin), kCompound(ActionDrop, 4)},
		{"IPv6 ack", withTCPFlags(spec6("2001:db8::1", "2001:db8:1::1", frames.ProtoTCP, 5, 81), ack|psh), kDefault(ActionPass)},
		{"IPv6 after extension headers", withTCPFlags(spec6("2001:db8::1", "2001:db8:1::1", frames.ProtoTCP, 5, 81, exth(frames.ProtoHopByHop, 0)), psh), kCompound(ActionDrop, 4)},
		{"tagged syn to 80", withTCPFlags(tagged(spec4("198.51.100.1", "198.51.100.2", frames.ProtoTCP, 5, 80), frames.TPID8021Q), syn), kCompound(ActionDrop, 0)},
		{"udp is not tcp", spec4("198.51.100.1", "198.51.100.2", frames.ProtoUDP, 5, 80).Build().Bytes, kDefault(ActionPass)},
		{"non-first fragment has no flags", func() []byte {
			s := spec4("198.51.100.1", "198.51.100.2", frames.ProtoTCP, 5, 81)
			s.IPv4FragOffset = 10
			return s.Build().Bytes
		}(), kDefault(ActionPass)},
		{"all four fields and flags", withTCPFlags(spec4("10.1.1.1", "10.9.1.1", frames.ProtoTCP, 5, 81), rst|ack), kCompound(ActionDrop, 5)},
		{"all four fields, flags out", withTCPFlags(spec4("10.1.1.1", "10.9.1.1", frames.ProtoTCP, 5, 81), ack), kDefault(ActionPass)},
	}
	t.Run("64 rules or fewer", func(t *testing.T) { checkCases(t, rules, cases) })
	t.Run("more than 64 rules", func(t *testing.T) { checkCases(t, rules+fillerRules(70), cases) })
}

// TestKernelDSCP: dscp matches the top 6 bits of the IPv4 TOS byte and of
// the IPv6 traffic class (which straddles the first two bytes), by value,
// range or name, for every IP frame (non-first fragments, tagged); the
// ECN bits below it do not count.
func TestKernelDSCP(t *testing.T) {
	rules := `
drop dscp ef                          # 0
drop udp dscp 8-15                    # 1
pass src 2001:db8::/32 dscp cs1       # 2
drop dscp 0 dst 192.0.2.0/24          # 3
`
	tos := func(s frames.Spec, tos uint8) frames.Spec { s.TOS = tos; return s }
	u4 := func(t uint8) []byte {
		return tos(spec4("198.51.100.1", "198.51.100.2", frames.ProtoUDP, 1, 2), t).Build().Bytes
	}
	cases := []matchCase{
		{"ef", tos(spec4("198.51.100.1", "198.51.100.2", 47, 0, 0), 46<<2).Build().Bytes, kCompound(ActionDrop, 0)},
		{"ef with ECN 3", tos(spec4("198.51.100.1", "198.51.100.2", 47, 0, 0), 46<<2|3).Build().Bytes, kCompound(ActionDrop, 0)},
		{"IPv6 ef", tos(spec6("2001:db9::1", "2001:db9::2", 47, 0, 0), 46<<2).Build().Bytes, kCompound(ActionDrop, 0)},
		{"IPv6 ef, flow label set", func() []byte {
			s := tos(spec6("2001:db9::1", "2001:db9::2", 47, 0, 0), 46<<2|1)
			s.FlowLabel = 0xfffff
			return s.Build().Bytes
		}(), kCompound(ActionDrop, 0)},
		{"udp 8", u4(8 << 2), kCompound(ActionDrop, 1)},
		{"udp 15", u4(15<<2 | 2), kCompound(ActionDrop, 1)},
		{"udp 16", u4(16 << 2), kDefault(ActionPass)},
		{"udp 7", u4(7 << 2), kDefault(ActionPass)},
		{"IPv6 cs1", tos(spec6("2001:db8::1", "2001:db9::2", 47, 0, 0), 8<<2).Build().Bytes, kCompound(ActionPass, 2)},
		{"IPv6 cs1 other src", tos(spec6("2001:db7::1", "2001:db9::2", 47, 0, 0), 8<<2).Build().Bytes, kDefault(ActionPass)},
		{"tagged non-first fragment, dscp 0", func() []byte {
			s := tagged(spec4("198.51.100.1", "192.0.2.7", frames.ProtoUDP, 1, 2), frames.TPID8021Q)
			s.IPv4FragOffset = 3
			return s.Build().Bytes
		}(), kCompound(ActionDrop, 3)},
		{"dscp 1 to 192.0.2.7", tos(spec4("198.51.100.1", "192.0.2.7", 47, 0, 0), 1<<2).Build().Bytes, kDefault(ActionPass)},
	}
	t.Run("64 rules or fewer", func(t *testing.T) { checkCases(t, rules, cases) })
	t.Run("more than 64 rules", func(t *testing.T) { checkCases(t, rules+fillerRules(70), cases) })
}

// TestKernelICMP: type and code match the first two bytes of the ICMP or
// ICMPv6 header, by number, range or (type) name, of first fragments only;
// an ICMP header cut short of type, code and checksum is malformed.
func TestKernelICMP(t *testing.T) {
	rules := `
malformed drop
drop icmp type echo-request               # 0
drop icmp type 3 code 4                   # 1
drop icmpv6 type 128-129                  # 2
pass icmp code 9-10 src 192.0.2.0/24      # 3
drop icmpv6 type nd-neighbor-solicit      # 4
`
	icmp4 := func(src string, typ, code uint8) frames.Spec {
		s := spec4(src, "198.51.100.2", frames.ProtoICMP, 0, 0)
		s.ICMPType, s.ICMPCode = typ, code
		return s
	}
	icmp6 := func(typ, code uint8, ext ...frames.ExtHeader) frames.Spec {
		s := spec6("2001:db8::1", "2001:db8::2", frames.ProtoICMPv6, 0, 0, ext...)
		s.ICMPType, s.ICMPCode = typ, code
		return s
	}
	cut := func(s frames.Spec, n int) []byte {
		f := s.Build()
		b := f.Bytes[:f.L4+n]
		// The IP length fields say what is left, so only the ICMP
		// header is short.
		if s.Src.Is4() {
			b[f.L3+2], b[f.L3+3] = 0, byte(f.L4-f.L3+n)
		} else {
			b[f.L3+4], b[f.L3+5] = 0, byte(f.L4-f.L3-40+n)
		}
		return b
	}
	cases := []matchCase{
		{"echo request", icmp4("198.51.100.1", 8, 0).Build().Bytes, kCompound(ActionDrop, 0)},
		{"echo reply", icmp4("198.51.100.1", 0, 0).Build().Bytes, kDefault(ActionPass)},
		{"unreachable code 4", icmp4("198.51.100.1", 3, 4).Build().Bytes, kCompound(ActionDrop, 1)},
		{"unreachable code 3", icmp4("198.51.100.1", 3, 3).Build().Bytes, kDefault(ActionPass)},
		{"tagged unreachable code 4", tagged(icmp4("198.51.100.1", 3, 4), frames.TPID8021AD).Build().Bytes, kCompound(ActionDrop, 1)},
		{"ICMPv6 echo request", icmp6(128, 0).Build().Bytes, kCompound(ActionDrop, 2)},
		{"ICMPv6 echo reply after extension headers", icmp6(129, 0, exth(frames.ProtoDestOpts, 0), exth(frames.ProtoRouting, 0)).Build().Bytes, kCompound(ActionDrop, 2)},
		{"ICMPv6 type 8 is not ICMP's", icmp6(8, 0).Build().Bytes, kDefault(ActionPass)},
		{"ICMPv6 neighbor solicitation", icmp6(135, 0).Build().Bytes, kCompound(ActionDrop, 4)},
		{"code 10 from the prefix", icmp4("192.0.2.5", 5, 10).Build().Bytes, kCompound(ActionPass, 3)},
		{"code 10 from elsewhere", icmp4("198.51.100.1", 5, 10).Build().Bytes, kDefault(ActionPass)},
		{"non-first fragment: no ICMP header", func() []byte {
			s := icmp4("198.51.100.1", 8, 0)
			s.IPv4FragOffset = 5
			return s.Build().Bytes
		}(), kDefault(ActionPass)},
		{"non-first IPv6 fragment", icmp6(128, 0, frag6h(9, false)).Build().Bytes, kDefault(ActionPass)},
		{"ICMP header of 4 bytes", cut(icmp4("198.51.100.1", 8, 0), 4), kCompound(ActionDrop, 0)},
		{"ICMP header of 3 bytes: malformed", cut(icmp4("198.51.100.1", 8, 0), 3), kMalformed(ActionDrop)},
		{"ICMPv6 header of 1 byte: malformed", cut(icmp6(128, 0), 1), kMalformed(ActionDrop)},
	}
	t.Run("64 rules or fewer", func(t *testing.T) { checkCases(t, rules, cases) })
	t.Run("more than 64 rules", func(t *testing.T) { checkCases(t, rules+fillerRules(70), cases) })
}

// TestKernelLen: len matches the IP packet's length as FlowSpec type 10
// defines it: the IPv4 total length (with the IPv4 header and its
// options), the IPv6 header's 40 bytes plus the payload length (so
// extension headers count); never the VLAN tags or the Ethernet header;
// non-first fragments by their own length. Comparisons are ranges.
func TestKernelLen(t *testing.T) {
	rules := `
drop udp sport 53 len >1024             # 0
drop len 100-200 dst 192.0.2.0/24       # 1
pass src 2001:db8::/32 len <=576        # 2
drop len <64 dst 198.51.100.0/24        # 3
drop frag len >=1500                    # 4
`
	pay := func(s frames.Spec, n int) frames.Spec { s.Payload = frames.Pattern(n); return s }
	u4 := func(sport uint16, total int) []byte {
		return pay(spec4("203.0.113.1", "203.0.113.2", frames.ProtoUDP, sport, 9), total-28).Build().Bytes
	}
	cases := []matchCase{
		{"udp 53, 1025 bytes", u4(53, 1025), kCompound(ActionDrop, 0)},
		{"udp 53, 1024 bytes", u4(53, 1024), kDefault(ActionPass)},
		{"udp 54, 1400 bytes", u4(54, 1400), kDefault(ActionPass)},
		{"udp 53, 1025 bytes, two VLAN tags", tagged(pay(spec4("203.0.113.1", "203.0.113.2", frames.ProtoUDP, 53, 9), 997), frames.TPID8021AD, frames.TPID8021Q).Build().Bytes, kCompound(ActionDrop, 0)},
		{"udp 53, 1024 bytes, two VLAN tags", tagged(pay(spec4("203.0.113.1", "203.0.113.2", frames.ProtoUDP, 53, 9), 996), frames.TPID8021AD, frames.TPID8021Q).Build().Bytes, kDefault(ActionPass)},
		{"IPv6 udp 53, 40+8+977 = 1025", pay(spec6("2001:db9::1", "2001:db9::2", frames.ProtoUDP, 53, 9), 977).Build().Bytes, kCompound(ActionDrop, 0)},
		{"IPv6 udp 53, 40+8+976 = 1024", pay(spec6("2001:db9::1", "2001:db9::2", frames.ProtoUDP, 53, 9), 976).Build().Bytes, kDefault(ActionPass)},
		{"IPv6 udp 53, 40+16 ext+8+961 = 1025", pay(spec6("2001:db9::1", "2001:db9::2", frames.ProtoUDP, 53, 9, frames.ExtHeader{Type: frames.ProtoHopByHop, Len: 16}), 961).Build().Bytes, kCompound(ActionDrop, 0)},
		{"IPv6 udp 53, 40+16 ext+8+960 = 1024", pay(spec6("2001:db9::1", "2001:db9::2", frames.ProtoUDP, 53, 9, frames.ExtHeader{Type: frames.ProtoHopByHop, Len: 16}), 960).Build().Bytes, kDefault(ActionPass)},
		{"100 bytes to 192.0.2.7", pay(spec4("203.0.113.1", "192.0.2.7", 47, 0, 0), 80).Build().Bytes, kCompound(ActionDrop, 1)},
		{"200 bytes to 192.0.2.7", pay(spec4("203.0.113.1", "192.0.2.7", 47, 0, 0), 180).Build().Bytes, kCompound(ActionDrop, 1)},
		{"99 bytes to 192.0.2.7", pay(spec4("203.0.113.1", "192.0.2.7", 47, 0, 0), 79).Build().Bytes, kDefault(ActionPass)},
		{"201 bytes to 192.0.2.7", pay(spec4("203.0.113.1", "192.0.2.7", 47, 0, 0), 181).Build().Bytes, kDefault(ActionPass)},
		{"IPv4 options count: 20+8 options+72 = 100", func() []byte {
			s := pay(spec4("203.0.113.1", "192.0.2.7", 47, 0, 0), 72)
			s.IPv4Options = make([]byte, 8)
			for i := range s.IPv4Options {
				s.IPv4Options[i] = 1 // NOP
			}
			return s.Build().Bytes
		}(), kCompound(ActionDrop, 1)},
		{"IPv6 576", pay(spec6("2001:db8::1", "2001:db9::2", 47, 0, 0), 536).Build().Bytes, kCompound(ActionPass, 2)},
		{"IPv6 577", pay(spec6("2001:db8::1", "2001:db9::2", 47, 0, 0), 537).Build().Bytes, kDefault(ActionPass)},
		{"IPv6 40, no payload", pay(spec6("2001:db8::1", "2001:db9::2", frames.ProtoNoNext, 0, 0), 0).Build().Bytes, kCompound(ActionPass, 2)},
		{"63 bytes to 198.51.100.9", pay(spec4("203.0.113.1", "198.51.100.9", 47, 0, 0), 43).Build().Bytes, kCompound(ActionDrop, 3)},
		{"64 bytes to 198.51.100.9", pay(spec4("203.0.113.1", "198.51.100.9", 47, 0, 0), 44).Build().Bytes, kDefault(ActionPass)},
		{"non-first fragment of 1500", func() []byte {
			s := pay(spec4("203.0.113.1", "203.0.113.2", frames.ProtoUDP, 1, 2), 1480)
			s.IPv4FragOffset = 185
			return s.Build().Bytes
		}(), kCompound(ActionDrop, 4)},
		{"non-first fragment of 1499", func() []byte {
			s := pay(spec4("203.0.113.1", "203.0.113.2", frames.ProtoUDP, 1, 2), 1479)
			s.IPv4FragOffset = 185
			return s.Build().Bytes
		}(), kDefault(ActionPass)},
		{"ARP", frames.Spec{EtherType: frames.EtherTypeARP, Payload: frames.Pattern(28)}.Build().Bytes, kDefault(ActionPass)},
	}
	t.Run("64 rules or fewer", func(t *testing.T) { checkCases(t, rules, cases) })
	t.Run("more than 64 rules", func(t *testing.T) { checkCases(t, rules+fillerRules(70), cases) })
}

// TestKernelFragBits: frag with bits matches FlowSpec's fragment bits:
// df (IPv4 only: IPv6 frames match no rule that names df, set or clear),
// any (a fragment: offset != 0 or more fragments), first (offset 0, more
// fragments), last (offset != 0, no more), each set or clear with !, from
// the IPv4 flags and offset (tagged or not) and the IPv6 fragment header
// (after other extension headers); frag alone stays "not the first".
func TestKernelFragBits(t *testing.T) {
	rules := `
drop dst 198.51.100.0/24 frag first     # 0
drop udp frag !df                       # 1
pass frag last src 2001:db8::/32        # 2
drop frag any,!first dst 203.0.113.0/24 # 3
drop udp dport 53 frag first,df         # 4
drop frag dst 192.0.2.0/24              # 5
`
	v4 := func(dst string, proto uint8, dport uint16, off uint16, more, df bool) []byte {
		s := spec4("10.1.1.1", dst, proto, 1, dport)
		s.IPv4FragOffset, s.IPv4MoreFragments, s.IPv4DontFragment = off, more, df
		return s.Build().Bytes
	}
	v6 := func(src string, proto uint8, off uint16, more bool, ext ...frames.ExtHeader) []byte {
		ext = append(ext, frames.ExtHeader{Type: frames.ProtoFragment, FragOffset: off, More: more, ID: 7})
		return spec6(src, "2001:db9::2", proto, 1, 2, ext...).Build().Bytes
	}
	cases := []matchCase{
		{"first fragment to 198.51.100.9", v4("198.51.100.9", 47, 0, 0, true, false), kCompound(ActionDrop, 0)},
		{"first fragment to 198.51.100.9, tagged", tagged(func() frames.Spec {
			s := spec4("10.1.1.1", "198.51.100.9", 47, 0, 0)
			s.IPv4MoreFragments = true
			return s
		}(), frames.TPID8021Q).Build().Bytes, kCompound(ActionDrop, 0)},
		{"middle fragment to 198.51.100.9", v4("198.51.100.9", 47, 0, 10, true, false), kDefault(ActionPass)},
		{"whole packet to 198.51.100.9", v4("198.51.100.9", 47, 0, 0, false, false), kDefault(ActionPass)},
		{"udp DF clear", v4("10.9.9.9", frames.ProtoUDP, 9, 0, false, false), kCompound(ActionDrop, 1)},
		{"udp DF set", v4("10.9.9.9", frames.ProtoUDP, 9, 0, false, true), kDefault(ActionPass)},
		{"IPv6 udp (no DF bit)", spec6("2001:db9::1", "2001:db9::2", frames.ProtoUDP, 1, 9).Build().Bytes, kDefault(ActionPass)},
		{"IPv6 last fragment from 2001:db8::1", v6("2001:db8::1", frames.ProtoUDP, 100, false), kCompound(ActionPass, 2)},
		{"IPv6 last fragment after a hop-by-hop header", v6("2001:db8::1", frames.ProtoUDP, 100, false, frames.ExtHeader{Type: frames.ProtoHopByHop}), kCompound(ActionPass, 2)},
		{"IPv6 middle fragment from 2001:db8::1", v6("2001:db8::1", frames.ProtoUDP, 100, true), kDefault(ActionPass)},
		{"IPv6 first fragment from 2001:db8::1", v6("2001:db8::1", 47, 0, true), kDefault(ActionPass)},
		{"IPv6 atomic fragment (offset 0, no more) from 2001:db8::1", v6("2001:db8::1", 47, 0, false), kDefault(ActionPass)},
		{"middle fragment to 203.0.113.5", v4("203.0.113.5", 47, 0, 3, true, false), kCompound(ActionDrop, 3)},
		{"last fragment to 203.0.113.5", v4("203.0.113.5", 47, 0, 3, false, false), kCompound(ActionDrop, 3)},
		{"first fragment to 203.0.113.5", v4("203.0.113.5", 47, 0, 0, true, false), kDefault(ActionPass)},
		{"first udp 53 fragment, DF", v4("10.9.9.9", frames.ProtoUDP, 53, 0, true, true), kCompound(ActionDrop, 4)},
		{"first udp 53 fragment, no DF", v4("10.9.9.9", frames.ProtoUDP, 53, 0, true, false), kCompound(ActionDrop, 1)},
		{"udp 53, DF, not a fragment", v4("10.9.9.9", frames.ProtoUDP, 53, 0, false, true), kDefault(ActionPass)},
		{"frag alone: non-first to 192.0.2.7", v4("192.0.2.7", frames.ProtoTCP, 80, 5, true, true), kCompound(ActionDrop, 5)},
		{"frag alone: first to 192.0.2.7", v4("192.0.2.7", 47, 0, 0, true, false), kDefault(ActionPass)},
	}
	t.Run("64 rules or fewer", func(t *testing.T) { checkCases(t, rules, cases) })
	t.Run("more than 64 rules", func(t *testing.T) { checkCases(t, rules+fillerRules(70), cases) })
}

// TestKernelPort: port matches a TCP or UDP frame whose source or
// destination port is in the range (FlowSpec type 4), one rule (one bit,
// one counter slot) for both; never a non-first fragment or a frame
// without ports; it ANDs with the other fields, sport and dport included.
func TestKernelPort(t *testing.T) {
	rules := `
pass udp port 53                         # 0
drop tcp src 192.0.2.0/24 port 1024-2047 # 1
drop udp sport 123 port 0-9              # 2
drop tcp port 22 dst 2001:db8::/32       # 3
`
	u4 := func(sport, dport uint16) []byte {
		return spec4("10.1.1.1", "10.2.2.2", frames.ProtoUDP, sport, dport).Build().Bytes
	}
	cases := []matchCase{
		{"udp sport 53", u4(53, 40000), kCompound(ActionPass, 0)},
		{"udp dport 53", u4(40000, 53), kCompound(ActionPass, 0)},
		{"udp both 53", u4(53, 53), kCompound(ActionPass, 0)},
		{"udp neither", u4(52, 54), kDefault(ActionPass)},
		{"tcp 53 is not udp", spec4("10.1.1.1", "10.2.2.2", frames.ProtoTCP, 53, 80).Build().Bytes, kDefault(ActionPass)},
		{"tcp from 192.0.2.9 sport 1500", spec4("192.0.2.9", "10.2.2.2", frames.ProtoTCP, 1500, 80).Build().Bytes, kCompound(ActionDrop, 1)},
		{"tcp from 192.0.2.9 dport 2047", spec4("192.0.2.9", "10.2.2.2", frames.ProtoTCP, 80, 2047).Build().Bytes, kCompound(ActionDrop, 1)},
		{"tcp from 192.0.2.9 ports 80, 2048", spec4("192.0.2.9", "10.2.2.2", frames.ProtoTCP, 80, 2048).Build().Bytes, kDefault(ActionPass)},
		{"tcp from 192.0.3.9 sport 1500", spec4("192.0.3.9", "10.2.2.2", frames.ProtoTCP, 1500, 80).Build().Bytes, kDefault(ActionPass)},
		{"udp sport 123 dport 5", u4(123, 5), kCompound(ActionDrop, 2)},
		{"udp sport 123 dport 10", u4(123, 10), kDefault(ActionPass)},
		{"udp sport 5 dport 123 (sport is not 123)", u4(5, 123), kDefault(ActionPass)},
		{"IPv6 tcp dport 22 to 2001:db8::1", spec6("2001:db9::1", "2001:db8::1", frames.ProtoTCP, 50000, 22).Build().Bytes, kCompound(ActionDrop, 3)},
		{"IPv6 tcp sport 22 to 2001:db8::1, tagged", tagged(spec6("2001:db9::1", "2001:db8::1", frames.ProtoTCP, 22, 50000), frames.TPID8021Q).Build().Bytes, kCompound(ActionDrop, 3)},
		{"IPv6 tcp 22 after a hop-by-hop header", spec6("2001:db9::1", "2001:db8::1", frames.ProtoTCP, 22, 50000, frames.ExtHeader{Type: frames.ProtoHopByHop}).Build().Bytes, kCompound(ActionDrop, 3)},
		{"IPv6 non-first fragment of udp", spec6("2001:db9::1", "2001:db8::1", frames.ProtoUDP, 53, 53, frames.ExtHeader{Type: frames.ProtoFragment, FragOffset: 10}).Build().Bytes, kDefault(ActionPass)},
		{"IPv4 non-first fragment of udp 53", func() []byte {
			s := spec4("10.1.1.1", "10.2.2.2", frames.ProtoUDP, 53, 53)
			s.IPv4FragOffset = 7
			return s.Build().Bytes
		}(), kDefault(ActionPass)},
		{"IPv4 first fragment of udp 53", func() []byte {
			s := spec4("10.1.1.1", "10.2.2.2", frames.ProtoUDP, 40000, 53)
			s.IPv4MoreFragments = true
			return s.Build().Bytes
		}(), kCompound(ActionPass, 0)},
		{"icmp", spec4("10.1.1.1", "10.2.2.2", frames.ProtoICMP, 0, 0).Build().Bytes, kDefault(ActionPass)},
	}
	t.Run("64 rules or fewer", func(t *testing.T) { checkCases(t, rules, cases) })
	t.Run("more than 64 rules", func(t *testing.T) { checkCases(t, rules+fillerRules(70), cases) })
	// IPv4 rules of sport, src and dst only take a shortcut in the
	// 64-rule classifier (FD_FLD4_ALL); port must keep them off it.
	t.Run("sport, src, dst and port", func(t *testing.T) {
		checkCases(t, "drop udp sport 1-65535 src 10.0.0.0/8 dst 10.0.0.0/8 port 53\n", []matchCase{
			{"udp 53", u4(1000, 53), kCompound(ActionDrop, 0)},
			{"udp 1000, 2000", u4(1000, 2000), kDefault(ActionPass)},
		})
	})
}

// TestKernelCompare: <, <=, > and >= on ttl, dscp, type and code match
// the ranges they leave, the ends included or not as written.
func TestKernelCompare(t *testing.T) {
	rules := `
drop udp ttl <3                         # 0
drop dscp >=46 dst 198.51.100.0/24      # 1
drop icmp type >12                      # 2
pass icmpv6 code <=1                    # 3
drop ttl >250 src 203.0.113.0/24        # 4
`
	u := func(ttl uint8) []byte {
		return withTTL(spec4("10.1.1.1", "10.2.2.2", frames.ProtoUDP, 1, 2), ttl)
	}
	tos := func(d uint8) []byte {
		s := spec4("10.1.1.1", "198.51.100.1", 47, 0, 0)
		s.TOS = d << 2
		return s.Build().Bytes
	}
	icmp := func(typ, code uint8) []byte {
		f := spec4("10.1.1.1", "10.2.2.2", frames.ProtoICMP, 0, 0).Build()
		f.Bytes[f.L4], f.Bytes[f.L4+1] = typ, code
		return f.Bytes
	}
	icmp6 := func(typ, code uint8) []byte {
		f := spec6("2001:db9::1", "2001:db9::2", frames.ProtoICMPv6, 0, 0).Build()
		f.Bytes[f.L4], f.Bytes[f.L4+1] = typ, code
		return f.Bytes
	}
	cases := []matchCase{
		{"udp ttl 2", u(2), kCompound(ActionDrop, 0)},
		{"udp ttl 3", u(3), kDefault(ActionPass)},
		{"dscp 46", tos(46), kCompound(ActionDrop, 1)},
		{"dscp 63", tos(63), kCompound(ActionDrop, 1)},
		{"dscp 45", tos(45), kDefault(ActionPass)},
		{"icmp type 13", icmp(13, 0), kCompound(ActionDrop, 2)},
		{"icmp type 12", icmp(12, 0), kDefault(ActionPass)},
		{"icmpv6 code 1", icmp6(128, 1), kCompound(ActionPass, 3)},
		{"icmpv6 code 2", icmp6(128, 2), kDefault(ActionPass)},
		{"ttl 251 from 203.0.113.1", withTTL(spec4("203.0.113.1", "10.2.2.2", 47, 0, 0), 251), kCompound(ActionDrop, 4)},
		{"ttl 250 from 203.0.113.1", withTTL(spec4("203.0.113.1", "10.2.2.2", 47, 0, 0), 250), kDefault(ActionPass)},
	}
	t.Run("64 rules or fewer", func(t *testing.T) { checkCases(t, rules, cases) })
	t.Run("more than 64 rules", func(t *testing.T) { checkCases(t, rules+fillerRules(70), cases) })
}

// TestKernelLists: every numeric field takes a value list (values and
// ranges), a negated list and comparisons, in the kernel as in the
// model: ports (sport, dport, port, each through the compound tables,
// with the address fast path's fields and without), len, ttl, dscp,
// ICMP type and code (queue: TestDifferential); frames tagged, with IPv6 extension
// headers, fragments (no ports: a port list, even negated, never matches
// a non-first fragment), and truncated (malformed).
func TestKernelLists(t *testing.T) {
	rules := `
drop udp dport 53,123,161,1900,11211                              # 0
drop udp dport 0-1023,11211 src 203.0.113.0/24                    # 1
drop tcp dport !22,443 dst 192.0.2.0/24                           # 2
pass tcp port 7000,7002-7004                                      # 3
drop udp sport >=60000 src 10.0.0.0/8 dst 10.9.0.0/16             # 4
drop ttl 1,2,250-255 dst 198.51.100.0/24                         # 5
drop dscp ef,af41,0-3 dst 198.51.100.128/25                       # 6
drop icmp type !0,8                                                # 7
drop icmpv6 code 1,3 type 1                                        # 8
drop len 64,1500-1600 dst 192.0.2.128/25                           # 9
pass len !0-1023 src 2001:db8::/32                                 # 10
drop udp port !5353 src 2001:db8:1::/48                             # 11
`
	u4 := func(src, dst string, sp, dp uint16) []byte {
		return spec4(src, dst, frames.ProtoUDP, sp, dp).Build().Bytes
	}
	t4 := func(src, dst string, sp, dp uint16) []byte {
		return spec4(src, dst, frames.ProtoTCP, sp, dp).Build().Bytes
	}
	pay := func(s frames.Spec, n int) []byte { s.Payload = frames.Pattern(n); return s.Build().Bytes }
	tos := func(dst string, d uint8) []byte {
		s := spec4("10.1.1.1", dst, 47, 0, 0)
		s.TOS = d << 2
		return s.Build().Bytes
	}
	icmp := func(p uint8, typ, code uint8) []byte {
		var f frames.Frame
		if p == frames.ProtoICMP {
			f = spec4("10.1.1.1", "10.2.2.2", p, 0, 0).Build()
		} else {
			f = spec6("2001:db9::1", "2001:db9::2", p, 0, 0).Build()
		}
		f.Bytes[f.L4], f.Bytes[f.L4+1] = typ, code
		return f.Bytes
	}
	nonfirst := func(s frames.Spec) []byte { s.IPv4FragOffset = 100; return s.Build().Bytes }
	cases := []matchCase{
		{"dport 53", u4("10.1.1.1", "10.2.2.2", 9, 53), kCompound(ActionDrop, 0)},
		{"dport 11211", u4("10.1.1.1", "10.2.2.2", 9, 11211), kCompound(ActionDrop, 0)},
		{"dport 1900, two VLAN tags", tagged(spec4("10.1.1.1", "10.2.2.2", frames.ProtoUDP, 9, 1900), frames.TPID8021AD, frames.TPID8021Q).Build().Bytes, kCompound(ActionDrop, 0)},
		{"dport 54", u4("10.1.1.1", "10.2.2.2", 9, 54), kDefault(ActionPass)},
		{"dport 1022 from 203.0.113.1", u4("203.0.113.1", "10.2.2.2", 9, 1022), kCompound(ActionDrop, 1)},
		{"dport 1024 from 203.0.113.1", u4("203.0.113.1", "10.2.2.2", 9, 1024), kDefault(ActionPass)},
		{"tcp dport 80 to 192.0.2.1: not 22 or 443", t4("10.1.1.1", "192.0.2.1", 9, 80), kCompound(ActionDrop, 2)},
		{"tcp dport 22 to 192.0.2.1", t4("10.1.1.1", "192.0.2.1", 9, 22), kDefault(ActionPass)},
		{"tcp dport 443 to 192.0.2.1", t4("10.1.1.1", "192.0.2.1", 9, 443), kDefault(ActionPass)},
		{"tcp non-first fragment to 192.0.2.1: no ports", nonfirst(spec4("10.1.1.1", "192.0.2.1", frames.ProtoTCP, 9, 80)), kDefault(ActionPass)},
		{"tcp sport 7003", t4("10.1.1.1", "10.2.2.2", 7003, 9), kCompound(ActionPass, 3)},
		{"tcp dport 7000", t4("10.1.1.1", "10.2.2.2", 9, 7000), kCompound(ActionPass, 3)},
		{"tcp 7001 both", t4("10.1.1.1", "10.2.2.2", 7001, 7001), kDefault(ActionPass)},
		{"udp sport 60000, all four fields", u4("10.1.2.3", "10.9.8.7", 60000, 9), kCompound(ActionDrop, 4)},
		{"udp sport 59999, all four fields", u4("10.1.2.3", "10.9.8.7", 59999, 9), kDefault(ActionPass)},
		{"ttl 2", withTTL(spec4("10.1.1.1", "198.51.100.1", 47, 0, 0), 2), kCompound(ActionDrop, 5)},
		{"ttl 3", withTTL(spec4("10.1.1.1", "198.51.100.1", 47, 0, 0), 3), kDefault(ActionPass)},
		{"ttl 251", withTTL(spec4("10.1.1.1", "198.51.100.1", 47, 0, 0), 251), kCompound(ActionDrop, 5)},
		{"dscp 46", tos("198.51.100.200", 46), kCompound(ActionDrop, 6)},
		{"dscp 34 (af41)", tos("198.51.100.200", 34), kCompound(ActionDrop, 6)},
		{"dscp 2", tos("198.51.100.200", 2), kCompound(ActionDrop, 6)},
		{"dscp 4", tos("198.51.100.200", 4), kDefault(ActionPass)},
		{"icmp type 3: not 0 or 8", icmp(frames.ProtoICMP, 3, 0), kCompound(ActionDrop, 7)},
		{"icmp type 8", icmp(frames.ProtoICMP, 8, 0), kDefault(ActionPass)},
		{"icmp type 0", icmp(frames.ProtoICMP, 0, 0), kDefault(ActionPass)},
		{"icmpv6 1 code 3", icmp(frames.ProtoICMPv6, 1, 3), kCompound(ActionDrop, 8)},
		{"icmpv6 1 code 2", icmp(frames.ProtoICMPv6, 1, 2), kDefault(ActionPass)},
		{"len 64 to 192.0.2.200", pay(spec4("10.1.1.1", "192.0.2.200", 47, 0, 0), 44), kCompound(ActionDrop, 9)},
		{"len 65 to 192.0.2.200", pay(spec4("10.1.1.1", "192.0.2.200", 47, 0, 0), 45), kDefault(ActionPass)},
		{"len 1550 to 192.0.2.200", pay(spec4("10.1.1.1", "192.0.2.200", 47, 0, 0), 1530), kCompound(ActionDrop, 9)},
		{"IPv6 len 1024 from 2001:db8::1", pay(spec6("2001:db8::1", "2001:db9::2", 47, 0, 0), 984), kCompound(ActionPass, 10)},
		{"IPv6 len 1023 from 2001:db8::1", pay(spec6("2001:db8::1", "2001:db9::2", 47, 0, 0), 983), kDefault(ActionPass)},
		{"IPv6 len 1024 after extension headers", pay(spec6("2001:db8::1", "2001:db9::2", 47, 0, 0, exth(frames.ProtoHopByHop, 0), exth(frames.ProtoDestOpts, 16)), 984-24), kCompound(ActionPass, 10)},
		{"udp6 5353 to 5353 from 2001:db8:1::1: port !5353 needs one port not 5353", spec6("2001:db8:1::1", "2001:db9::2", frames.ProtoUDP, 5353, 5353).Build().Bytes, kDefault(ActionPass)},
		{"udp6 5353 to 54 from 2001:db8:1::1", spec6("2001:db8:1::1", "2001:db9::2", frames.ProtoUDP, 5353, 54).Build().Bytes, kCompound(ActionDrop, 11)},
		{"udp6 5353 to 54 after extension headers", spec6("2001:db8:1::1", "2001:db9::2", frames.ProtoUDP, 5353, 54, exth(frames.ProtoHopByHop, 0)).Build().Bytes, kCompound(ActionDrop, 11)},
		{"udp truncated in its header: malformed", u4("10.1.1.1", "10.2.2.2", 9, 53)[:14+20+4], kMalformed(ActionPass)},
		{"ARP", frames.Spec{EtherType: frames.EtherTypeARP, Payload: frames.Pattern(28)}.Build().Bytes, kDefault(ActionPass)},
	}
	t.Run("64 rules or fewer", func(t *testing.T) { checkCases(t, rules, cases) })
	t.Run("more than 64 rules", func(t *testing.T) { checkCases(t, rules+fillerRules(70), cases) })
}

// TestKernelFlowLabel: flowlabel matches the IPv6 flow label (20 bits
// after the traffic class), values, ranges, lists, negations and
// comparisons, written in decimal or hexadecimal, of IPv6 frames only
// (an IPv4 frame never matches, not even a negation), tagged, with
// extension headers, non-first fragments.
func TestKernelFlowLabel(t *testing.T) {
	rules := `
drop flowlabel 0x12345                                      # 0
drop udp flowlabel 0x100-0x1ff,7 dport 53                   # 1
pass src 2001:db8::/32 flowlabel !0                         # 2
drop flowlabel >=0xff000                                    # 3
drop ether ipv6 frag flowlabel 9                            # 4
`
	fl := func(s frames.Spec, label uint32) []byte { s.FlowLabel = label; return s.Build().Bytes }
	u6 := func(src string, dp uint16, label uint32) []byte {
		return fl(spec6(src, "2001:db9::2", frames.ProtoUDP, 9, dp), label)
	}
	cases := []matchCase{
		{"label 0x12345", u6("2001:db9::1", 80, 0x12345), kCompound(ActionDrop, 0)},
		{"label 0x12344", u6("2001:db9::1", 80, 0x12344), kDefault(ActionPass)},
		{"label 0x12345, two VLAN tags", tagged(func() frames.Spec {
			s := spec6("2001:db9::1", "2001:db9::2", frames.ProtoUDP, 9, 80)
			s.FlowLabel = 0x12345
			return s
		}(), frames.TPID8021AD, frames.TPID8021Q).Build().Bytes, kCompound(ActionDrop, 0)},
		{"label 0x12345 with traffic class 0xff", func() []byte {
			s := spec6("2001:db9::1", "2001:db9::2", frames.ProtoUDP, 9, 80)
			s.FlowLabel, s.TOS = 0x12345, 0xff
			return s.Build().Bytes
		}(), kCompound(ActionDrop, 0)},
		{"udp 53 label 0x180", u6("2001:db9::1", 53, 0x180), kCompound(ActionDrop, 1)},
		{"udp 53 label 7", u6("2001:db9::1", 53, 7), kCompound(ActionDrop, 1)},
		{"udp 53 label 0x200", u6("2001:db9::1", 53, 0x200), kDefault(ActionPass)},
		{"udp 53 label 0x180 after extension headers", fl(spec6("2001:db9::1", "2001:db9::2", frames.ProtoUDP, 9, 53, exth(frames.ProtoHopByHop, 0), exth(frames.ProtoDestOpts, 8)), 0x180), kCompound(ActionDrop, 1)},
		{"from 2001:db8::1 label 1", u6("2001:db8::1", 80, 1), kCompound(ActionPass, 2)},
		{"from 2001:db8::1 label 0", u6("2001:db8::1", 80, 0), kDefault(ActionPass)},
		{"label 0xfffff", u6("2001:db9::1", 80, 0xfffff), kCompound(ActionDrop, 3)},
		{"label 0xfefff", u6("2001:db9::1", 80, 0xfefff), kDefault(ActionPass)},
		{"non-first fragment label 9", fl(spec6("2001:db9::1", "2001:db9::2", frames.ProtoUDP, 9, 53, frag6h(100, false)), 9), kCompound(ActionDrop, 4)},
		{"first fragment label 9 is not frag", fl(spec6("2001:db9::1", "2001:db9::2", frames.ProtoUDP, 9, 80, frag6h(0, true)), 9), kDefault(ActionPass)},
		{"IPv4 never has a flow label", spec4("10.1.1.1", "10.2.2.2", frames.ProtoUDP, 9, 53).Build().Bytes, kDefault(ActionPass)},
		{"IPv6 header cut short: malformed", u6("2001:db9::1", 80, 0x12345)[:14+30], kMalformed(ActionPass)},
	}
	t.Run("64 rules or fewer", func(t *testing.T) { checkCases(t, rules, cases) })
	t.Run("more than 64 rules", func(t *testing.T) { checkCases(t, rules+fillerRules(70), cases) })
}

// TestKernelPrefixOffset: an IPv6 src or dst with an offset (ADDR/LEN/OFF,
// FlowSpec types 1 and 2, RFC 8956 3.1) matches the frames whose address
// has bits OFF to LEN-1 of ADDR, whatever its first OFF bits: offsets
// within the first 64 bits, past them, and bits on both sides of bit 64
// (where the program's two address words meet); src and dst together and
// with a prefix from bit 0 on the other field; offset 0 written out; never
// an IPv4 frame; with up to 64 compound rules and with more.
func TestKernelPrefixOffset(t *testing.T) {
	rules := `
drop src ::1:1234:5678:9800:0/104/60              # 0: RFC 8956 3.8.2's pattern, bits 60-103
drop udp dst 0:0:db8::/48/32                      # 1: bits 32-47
drop src ::8000:0:0:0/65/64                       # 2: bit 64 alone
drop dst 0:0:0:ff:ff00::/72/56                    # 3: bits 56-71, across bit 64
pass src 2001:db8:ffff::/48/0                     # 4: offset 0 is a prefix from bit 0 (a prefix rule)
drop src 0:0:0:1::/64/48 dst 0:0:0:2::/64/48      # 5: both fields
drop src 2001:db8::/32 dst ::a/128/112            # 6: with a prefix from bit 0
`
	u6 := func(src, dst string) []byte { return spec6(src, dst, frames.ProtoUDP, 1, 2).Build().Bytes }
	tc6 := func(src, dst string) []byte { return spec6(src, dst, frames.ProtoTCP, 1, 2).Build().Bytes }
	cases := []matchCase{
		{"bits 60-103 equal, first bits other", u6("2001:db8:ab:cd1:1234:5678:98ff:1", "fe80::1"), kCompound(ActionDrop, 0)},
		{"bits 60-103 equal, first bits zero", u6("::1:1234:5678:9800:0", "fe80::1"), kCompound(ActionDrop, 0)},
		{"bit 63 differs", u6("2001:db8:ab:cd0:1234:5678:98ff:1", "fe80::1"), kDefault(ActionPass)},
		{"bit 103 differs", u6("2001:db8:ab:cd1:1234:5678:99ff:1", "fe80::1"), kDefault(ActionPass)},
		{"bit 64 differs: not rule 0, but rule 2 (bit 64 set)", u6("2001:db8:ab:cd1:9234:5678:98ff:1", "fe80::1"), kCompound(ActionDrop, 2)},
		{"dst bits 32-47", u6("fe80::1", "2001:db8:db8::1"), kCompound(ActionDrop, 1)},
		{"dst bits 32-47, tcp", tc6("fe80::1", "2001:db8:db8::1"), kDefault(ActionPass)},
		{"dst bits 32-47 differ", u6("fe80::1", "2001:db8:db9::1"), kDefault(ActionPass)},
		{"bit 64 set", u6("2001:db8::8000:0:0:1", "fe80::1"), kCompound(ActionDrop, 2)},
		{"bit 64 clear", u6("2001:db8::7fff:0:0:1", "fe80::1"), kDefault(ActionPass)},
		{"bits 56-71 set", u6("fe80::1", "2001:db8:1:7ff:ff00::1"), kCompound(ActionDrop, 3)},
		{"bit 71 clear", u6("fe80::1", "2001:db8:1:ff:fe00::1"), kDefault(ActionPass)},
		{"bit 63 clear", u6("fe80::1", "2001:db8:1:fe:ff00::1"), kDefault(ActionPass)},
		{"offset 0: a prefix rule", u6("2001:db8:ffff::1", "fe80::1"), kPrefix(ActionPass, 4)},
		{"offset 0, first bits other", u6("2001:db9:ffff::1", "fe80::1"), kDefault(ActionPass)},
		{"both fields", u6("2001:db8:0:1::5", "2001:db8:0:2::5"), kCompound(ActionDrop, 5)},
		{"both fields swapped", u6("2001:db8:0:2::5", "2001:db8:0:1::5"), kDefault(ActionPass)},
		{"src only of both", u6("2001:db8:0:1::5", "2001:db8:0:3::5"), kDefault(ActionPass)},
		{"with a prefix from bit 0", u6("2001:db8::1", "fe80:1::a"), kCompound(ActionDrop, 6)},
		{"with a prefix from bit 0, src out", u6("2001:db9::1", "fe80:1::a"), kDefault(ActionPass)},
		{"tagged, after extension headers", spec6Bytes(tagged(spec6("2001:db8:ab:cd1:1234:5678:98ff:1", "fe80::1", frames.ProtoUDP, 1, 2, exth(frames.ProtoHopByHop, 0)), frames.TPID8021Q)), kCompound(ActionDrop, 0)},
		{"non-first fragment", spec6Bytes(spec6("2001:db8::8000:0:0:1", "fe80::1", frames.ProtoUDP, 1, 2, frag6h(100, false))), kCompound(ActionDrop, 2)},
		{"IPv4 never", spec4("0.0.0.1", "0.0.0.10", frames.ProtoUDP, 1, 2).Build().Bytes, kDefault(ActionPass)},
	}
	t.Run("64 rules or fewer", func(t *testing.T) { checkCases(t, rules, cases) })
	t.Run("more than 64 rules", func(t *testing.T) { checkCases(t, rules+fillerRules(70), cases) })
}

func spec6Bytes(s frames.Spec) []byte { return s.Build().Bytes }

// TestPrefixOffsetCapacity: more distinct IPv6 prefixes with an offset
// than the program keeps is refused, saying what to do, and nothing
// changes; off6Max of them are taken.
func TestPrefixOffsetCapacity(t *testing.T) {
	e := newTestEngine(t, testOptions)
	var b strings.Builder
	for i := range off6Max {
		fmt.Fprintf(&b, "drop src ::%x:0:0/96/80\n", i+1)
	}
	mustApply(t, e, kParse(t, b.String()))
	fmt.Fprintf(&b, "drop dst ::%x:0:0/96/80\n", 99)
	err := e.Apply(kParse(t, b.String()))
	if err == nil || !errors.Is(err, ErrCapacity) || !strings.Contains(err.Error(), "more than 16 distinct IPv6 prefixes with an offset") {
		t.Fatalf("Apply of %d offset prefixes: %v, want ErrCapacity naming the limit", off6Max+1, err)
	}
}
