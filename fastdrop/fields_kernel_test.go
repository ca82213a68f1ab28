package fastdrop

import (
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
