package agent

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/xdpdrop/xdpdrop/fastdrop"
	"github.com/xdpdrop/xdpdrop/internal/frames"
)

func originRulesOf(t *testing.T, origin, text string) []fastdrop.Rule {
	t.Helper()
	rs, err := fastdrop.Parse(strings.NewReader(text), "t.rules")
	if err != nil {
		t.Fatal(err)
	}
	for i := range rs.Rules {
		rs.Rules[i].Origin, rs.Rules[i].Line = origin, 0
	}
	return rs.Rules
}

// TestPlaceDst: which FlowSpec rules (in RFC 8955 order) go to the
// destination prefix table, precedence case by case.
func TestPlaceDst(t *testing.T) {
	for _, tc := range []struct {
		name     string
		flow     string // the FlowSpec rules, in order
		blockers []fastdrop.Rule
		want     string // the rules after placement
	}{
		{"victims", "drop ether ipv4 dst 10.0.0.1\ndrop ether ipv4 dst 10.0.0.2\ndrop ether ipv6 dst 2001:db8::1",
			nil, "drop dst 10.0.0.1/32|drop dst 10.0.0.2/32|drop dst 2001:db8::1/128"},
		{"nested, longer first (RFC 8955)", "pass ether ipv4 dst 10.1.2.3\ndrop ether ipv4 dst 10.1.0.0/16",
			nil, "pass dst 10.1.2.3/32|drop dst 10.1.0.0/16"},
		{"nested, shorter first (not RFC order): the first stays", "drop ether ipv4 dst 10.1.0.0/16\npass ether ipv4 dst 10.1.2.3",
			nil, "drop ether ipv4 dst 10.1.0.0/16|pass dst 10.1.2.3/32"},
		{"a later compound route with another verdict", "pass ether ipv4 dst 10.1.2.3\ndrop ether ipv4 udp dst 10.1.0.0/16",
			nil, "pass ether ipv4 dst 10.1.2.3/32|drop ether ipv4 udp dst 10.1.0.0/16"},
		{"a later compound route with the same verdict", "drop ether ipv4 dst 10.1.2.3\ndrop ether ipv4 udp dst 10.1.0.0/16",
			nil, "drop dst 10.1.2.3/32|drop ether ipv4 udp dst 10.1.0.0/16"},
		{"a later compound route elsewhere", "pass ether ipv4 dst 10.1.2.3\ndrop ether ipv4 udp dst 10.2.0.0/16\ndrop ether ipv6 udp",
			nil, "pass dst 10.1.2.3/32|drop ether ipv4 udp dst 10.2.0.0/16|drop ether ipv6 udp"},
		{"an earlier compound route", "drop ether ipv4 udp dst 10.1.0.0/16\npass ether ipv4 dst 10.1.2.3",
			nil, "drop ether ipv4 udp dst 10.1.0.0/16|pass dst 10.1.2.3/32"},
		{"sampling differs", "drop ether ipv4 dst 10.1.2.3\ndrop ether ipv4 udp dst 10.1.0.0/16 sample 1/100",
			nil, "drop ether ipv4 dst 10.1.2.3/32|drop ether ipv4 udp dst 10.1.0.0/16 sample 1/100"},
		{"a limit is never the same effect", "drop ether ipv4 dst 10.1.2.3\nlimit 100/s ether ipv4 udp dst 10.1.0.0/16",
			nil, "drop ether ipv4 dst 10.1.2.3/32|limit 100/s ether ipv4 udp dst 10.1.0.0/16"},
		{"the chain: kept compound blocks the one before", "drop ether ipv4 dst 10.1.2.3\npass ether ipv4 dst 10.1.2.0/24\ndrop ether ipv4 tcp dst 10.1.0.0/16",
			nil, "drop ether ipv4 dst 10.1.2.3/32|pass ether ipv4 dst 10.1.2.0/24|drop ether ipv4 tcp dst 10.1.0.0/16"},
		{"another origin's longer prefix with another verdict", "drop ether ipv4 dst 10.1.0.0/16",
			originRulesOf(t, "", "pass dst 10.1.2.0/24"), "drop ether ipv4 dst 10.1.0.0/16"},
		{"another origin's longer prefix with the same verdict", "drop ether ipv4 dst 10.1.0.0/16",
			originRulesOf(t, "", "drop dst 10.1.2.0/24"), "drop dst 10.1.0.0/16"},
		{"another origin's same prefix", "drop ether ipv4 dst 10.1.0.0/16",
			originRulesOf(t, "agent:file", "drop dst 10.1.0.0/16"), "drop ether ipv4 dst 10.1.0.0/16"},
		{"another origin's shorter prefix", "drop ether ipv4 dst 10.1.2.3",
			originRulesOf(t, "", "pass dst 10.0.0.0/8"), "drop dst 10.1.2.3/32"},
		{"a later origin's compound rule", "drop ether ipv4 dst 10.1.2.3\ndrop ether ipv6 dst 2001:db8::1",
			originRulesOf(t, "zeta", "pass udp"), "drop ether ipv4 dst 10.1.2.3/32|drop ether ipv6 dst 2001:db8::1/128"},
		{"a later origin's compound rule of the other family", "drop ether ipv4 dst 10.1.2.3",
			originRulesOf(t, "zeta", "pass ether ipv6 udp\npass ether arp"), "drop dst 10.1.2.3/32"},
		{"not destination-only", "drop ether ipv4 udp dst 10.1.2.3\ndrop ether ipv4 src 10.9.0.0/16\ndrop ether ipv4 dst 10.1.2.4 frag any",
			nil, "drop ether ipv4 udp dst 10.1.2.3/32|drop ether ipv4 src 10.9.0.0/16|drop ether ipv4 dst 10.1.2.4/32 frag any"},
		{"sample kept", "drop ether ipv4 dst 10.1.2.3 sample 1/1000", nil, "drop dst 10.1.2.3/32 sample 1/1000"},
	} {
		rules := originRulesOf(t, OriginFlowSpec, tc.flow)
		placeDst(rules, tc.blockers)
		var got []string
		for _, r := range rules {
			got = append(got, r.String())
		}
		if g := strings.Join(got, "|"); g != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, g, tc.want)
		}
	}
}

// TestPlaceDstKeepsVerdicts: over random FlowSpec rule lists (in any
// order) beside random rules of other origins, the rule set with the
// rules placeDst put in the destination table gives every frame the
// verdict and sampling the all-compound one gives (fastdrop's model,
// which the kernel program is tested against).
func TestPlaceDstKeepsVerdicts(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 8955))
	v4 := []string{"10.1.0.0/16", "10.1.2.0/24", "10.1.2.3/32", "10.1.2.4/32", "10.1.3.0/24", "10.2.0.0/16", "10.0.0.0/8"}
	v6 := []string{"2001:db8:1::/48", "2001:db8:1:2::/64", "2001:db8:1:2::9/128", "2001:db8:2::/48"}
	hosts4 := []string{"10.1.2.3", "10.1.2.4", "10.1.2.5", "10.1.3.1", "10.2.0.1", "10.9.9.9", "192.0.2.1"}
	hosts6 := []string{"2001:db8:1:2::9", "2001:db8:1:2::1", "2001:db8:1:3::1", "2001:db8:2::1", "2001:db8:9::1"}
	pick := func(s []string) string { return s[rng.IntN(len(s))] }
	act := func() string { return []string{"drop", "pass"}[rng.IntN(2)] }
	placedAny, kept := 0, 0
	for set := range 300 {
		var flow []string
		for range 1 + rng.IntN(12) {
			is6 := rng.IntN(3) == 0
			p, ether := pick(v4), "ipv4"
			if is6 {
				p, ether = pick(v6), "ipv6"
			}
			var extra, tail string
			switch rng.IntN(6) {
			case 0:
				extra = " udp"
			case 1:
				extra = " tcp dport 80"
			case 2:
				tail = " sample 1/10"
			}
			flow = append(flow, act()+" ether "+ether+extra+" dst "+p+tail)
		}
		var others []fastdrop.Rule
		seen := map[string]bool{}
		for range rng.IntN(4) {
			p := pick(v4)
			if rng.IntN(3) == 0 {
				p = pick(v6)
			}
			if seen[p] {
				continue
			}
			seen[p] = true
			origin := []string{"", "agent:file"}[rng.IntN(2)]
			others = append(others, originRulesOf(t, origin, act()+" dst "+p)...)
		}
		if rng.IntN(3) == 0 {
			others = append(others, originRulesOf(t, "zeta", act()+" udp dst "+pick(v4))...)
		}
		if rng.IntN(3) == 0 {
			others = append(others, originRulesOf(t, "agent:file", act()+" tcp")...)
		}
		others = append(others, originRulesOf(t, "", act()+" src 192.0.2.0/24")...)
		var blockers []fastdrop.Rule
		for _, r := range others {
			if r.IsPrefixOnly() && r.Dst.IsValid() || !r.IsPrefixOnly() && r.Origin == "zeta" {
				blockers = append(blockers, r)
			}
		}
		rules := originRulesOf(t, OriginFlowSpec, strings.Join(flow, "\n"))
		before := &fastdrop.RuleSet{Rules: append(append([]fastdrop.Rule{}, others...), rules...)}
		if err := before.Validate(); err != nil {
			t.Fatal(err)
		}
		n := placeDst(rules, blockers)
		placedAny += n
		kept += len(rules) - n
		after := &fastdrop.RuleSet{Rules: append(append([]fastdrop.Rule{}, others...), rules...)}
		if err := after.Validate(); err != nil {
			t.Fatalf("set %d: the placed set: %v", set, err)
		}
		mb, ma := fastdrop.NewModel(before), fastdrop.NewModel(after)
		for range 200 {
			var f frames.Frame
			sport, dport := uint16(1000+rng.IntN(3)), uint16([]int{53, 80}[rng.IntN(2)])
			switch rng.IntN(4) {
			case 0:
				f = frames.UDP4(pick(hosts4), pick(hosts4), sport, dport, 8)
			case 1:
				f = frames.TCP4(pick(hosts4), pick(hosts4), sport, dport, 0)
			case 2:
				f = frames.UDP6(pick(hosts6), pick(hosts6), sport, dport, 8)
			default:
				f = frames.TCP6(pick(hosts6), pick(hosts6), sport, dport, 0)
			}
			b, a := mb.Eval(f.Bytes), ma.Eval(f.Bytes)
			sb, sa := uint32(0), uint32(0)
			if b.Rule >= 0 {
				sb = before.Rules[b.Rule].Sample
			}
			if a.Rule >= 0 {
				sa = after.Rules[a.Rule].Sample
			}
			if b.Verdict != a.Verdict || sb != sa {
				t.Fatalf("set %d: frame %x: all compound %v (sample %d), placed %v (sample %d)\nbefore:\n%s\nafter:\n%s",
					set, f.Bytes, b, sb, a, sa, text(before), text(after))
			}
		}
	}
	if placedAny == 0 || kept == 0 {
		t.Fatalf("placed %d, kept compound %d: the sets test nothing", placedAny, kept)
	}
	t.Logf("placed %d rules in the destination table, kept %d compound", placedAny, kept)
}

func text(rs *fastdrop.RuleSet) string {
	var b strings.Builder
	for _, r := range rs.Rules {
		b.WriteString(fastdrop.OriginName(r.Origin) + ": " + r.String() + "\n")
	}
	return b.String()
}
