package fastdrop

import (
	"fmt"
	"net/netip"
	"testing"
)

// BenchmarkApplyOriginBeside: one FlowSpec-like origin's change (one of
// its 100 compound rules replaced) beside N prefix rules of another
// origin (a rule file's): what one BGP change costs the agent.
func BenchmarkApplyOriginBeside(b *testing.B) {
	for _, n := range []int{0, 100_000, 1_000_000} {
		b.Run(fmt.Sprintf("file=%d", n), func(b *testing.B) {
			files := &RuleSet{Rules: make([]Rule, n)}
			for i := range n {
				a := netip.AddrFrom4([4]byte{10 + byte(i>>24), byte(i >> 16), byte(i >> 8), byte(i)})
				files.Rules[i] = Rule{Action: ActionDrop, Src: netip.PrefixFrom(a, 32), Origin: "agent:file"}
			}
			opts := CapacityFor(files, 1.5)
			e := newTestEngine(b, opts)
			if err := e.Apply(files); err != nil {
				b.Fatal(err)
			}
			fs := func(k int) *RuleSet {
				rs := &RuleSet{}
				for i := range 100 {
					rs.Rules = append(rs.Rules, Rule{Action: ActionDrop, EtherType: 0x0800, Dst: netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, byte(i), byte(k)}), 32)})
				}
				return rs
			}
			if err := e.ApplyOrigin("agent:flowspec", fs(0)); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := range b.N {
				// Rule 50 changes; the others stay.
				rs := fs(0)
				rs.Rules[50].Dst = netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 19, byte(i >> 8), byte(i)}), 32)
				if err := e.ApplyOrigin("agent:flowspec", rs); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
