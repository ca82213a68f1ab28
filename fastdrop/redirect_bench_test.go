package fastdrop

import (
	"net/netip"
	"testing"

	"github.com/xdpdrop/xdpdrop/gen"
)

// BenchmarkRedirectFilter is the per-frame cost of the redirect path
// (issue 14 item 6: "keep a trivial filter cheap"): the plain AF_XDP
// program (bpf/redirect.c: every frame to its queue's socket, no rules,
// libxdp's one-line program) against the fast-drop program with the rules
// xdpdrop redirect installs: without --filter on every queue of the
// interface (`redirect`), on some of them (`redirect queue 0`), and a
// 4-rule filter. A UDP/IPv4 frame to port 53 on queue 0 with no socket
// bound, so every program ends in bpf_redirect_map's XDP_PASS fallback.
//
//	go test -run '^$' -bench RedirectFilter -benchtime 30x ./fastdrop/
func BenchmarkRedirectFilter(b *testing.B) {
	bare := loadBare(b)
	frame := benchUDP(netip.MustParseAddr("198.18.0.2"), 53)
	b.Run("program=plain", func(b *testing.B) {
		var objs gen.RedirectObjects
		if err := gen.LoadRedirectObjects(&objs, nil); err != nil {
			b.Fatalf("load the plain redirect program: %v", err)
		}
		b.Cleanup(func() { objs.Close() })
		sideBySide(b, bare, objs.XskRedirect, frame, 2)
	})
	for _, tc := range []struct{ name, rules string }{
		{"rules=redirect", "redirect\n"},
		{"rules=redirect-queue-0", "redirect queue 0\n"},
		{"rules=4", "drop src 10.1.0.0/16 queue 0\npass tcp dport 53 queue 0\ndrop udp dport 11211 queue 0\nredirect udp dport 53 queue 0\n"},
		{"rules=4-every-queue", "drop src 10.1.0.0/16\npass tcp dport 53\ndrop udp dport 11211\nredirect udp dport 53\n"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			rs := &RuleSet{Rules: benchRules([]string{tc.rules})}
			e := benchEngine(b, &RuleSet{})
			if err := e.ApplyOrigin(OriginRedirect, rs); err != nil {
				b.Fatalf("ApplyOrigin: %v", err)
			}
			sideBySide(b, bare, e.Program(), frame, 2)
		})
	}
}
