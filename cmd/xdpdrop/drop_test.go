package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xdpdrop/xdpdrop/fastdrop"
)

// TestRuleSetFromFlagsDeny: --deny rules are checked against the file as
// RuleSet.Validate would, with its error, without validating the file twice.
func TestRuleSetFromFlagsDeny(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.rules")
	if err := os.WriteFile(path, []byte("drop udp dport 53\ndrop src 10.0.0.0/8\npass src 2001:db8::/32\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		deny []string
		dup  bool
	}{
		{"new prefixes", []string{"192.0.2.0/24", "192.0.2.1"}, false},
		{"prefix of the file", []string{"192.0.2.0/24", "10.0.0.0/8"}, true},
		{"IPv6 prefix of the file", []string{"2001:db8::/32"}, true},
		{"twice on the command line", []string{"192.0.2.1", "198.51.100.0/24", "192.0.2.1/32"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs, err := ruleSetFromFlags(path, tc.deny, "drop", "")
			if !tc.dup {
				if err != nil {
					t.Fatalf("ruleSetFromFlags: %v", err)
				}
				if n := len(rs.Rules); n != 3+len(tc.deny) || rs.Policy != fastdrop.ActionDrop {
					t.Errorf("%d rules, policy %v; want %d, drop", n, rs.Policy, 3+len(tc.deny))
				}
				return
			}
			if !errors.Is(err, fastdrop.ErrDuplicatePrefix) {
				t.Fatalf("ruleSetFromFlags: %v, want ErrDuplicatePrefix", err)
			}
			// The same set, validated whole, gives the same error.
			whole, perr := fastdrop.ParseFile(path)
			if perr != nil {
				t.Fatal(perr)
			}
			for _, d := range tc.deny {
				p, _ := fastdrop.ParsePrefix("--deny", d)
				whole.Rules = append(whole.Rules, fastdrop.Rule{Action: fastdrop.ActionDrop, Src: p})
			}
			if werr := whole.Validate(); werr == nil || werr.Error() != err.Error() {
				t.Errorf("error %q, Validate says %v", err, werr)
			}
		})
	}
}

// TestDenyRefusedAsInRuleFile: a --deny value a rule file would refuse
// ("drop src VALUE") is refused with the rule file's message, as a usage
// error, instead of being masked or passed on.
func TestDenyRefusedAsInRuleFile(t *testing.T) {
	for _, tc := range []struct{ deny, want string }{
		{"192.0.2.77/24", "--deny 192.0.2.77/24 has bits set after the prefix length; write 192.0.2.0/24 (or 192.0.2.77/32 for the single address)"},
		{"2001:db8::1/32", "--deny 2001:db8::1/32 has bits set after the prefix length; write 2001:db8::/32 (or 2001:db8::1/128 for the single address)"},
		{"::ffff:192.0.2.0/120", "--deny ::ffff:192.0.2.0/120 is an IPv4-mapped IPv6 prefix, which never matches; write the IPv4 prefix 192.0.2.0/24"},
		{"fe80::1%eth0", "--deny fe80::1%eth0: an address with a zone (%eth0) cannot be matched; remove the zone"},
		{"192.0.2.0/33", `--deny 192.0.2.0/33: prefix length "33" out of range (want 0-32)`},
		{"nonsense", `--deny nonsense: "nonsense" is not an IPv4 or IPv6 address`},
	} {
		t.Run(tc.deny, func(t *testing.T) {
			_, err := ruleSetFromFlags("", []string{tc.deny}, "", "")
			var ue usageError
			if !errors.As(err, &ue) {
				t.Fatalf("ruleSetFromFlags(--deny %s): %v, want a usage error", tc.deny, err)
			}
			if !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("error %q\nwant  %q", err, tc.want)
			}
			// The rule file says the same of "drop src VALUE", under src.
			_, perr := fastdrop.Parse(strings.NewReader("drop src "+tc.deny), "f")
			if perr == nil {
				t.Fatal("the rule file accepts it")
			}
			fileMsg := strings.TrimPrefix(perr.Error(), "f:1: src ")
			if flagMsg := strings.TrimPrefix(err.Error(), "--deny "); fileMsg != flagMsg {
				t.Errorf("flag says %q, rule file %q", flagMsg, fileMsg)
			}
		})
	}
}

// TestOtherLayoutAdvice: pins of another version of xdpdrop are met with
// the commands that replace them; other errors pass unchanged.
func TestOtherLayoutAdvice(t *testing.T) {
	err := fmt.Errorf("fastdrop: the maps in /sys/fs/bpf/xdpdrop/veth0/maps were %w (layout 0, this one 1); detach and attach again", fastdrop.ErrOtherLayout)
	got := otherLayoutAdvice(err, "veth0")
	want := "fastdrop: the maps in /sys/fs/bpf/xdpdrop/veth0/maps were pinned by another version of xdpdrop (layout 0, this one 1); " +
		"detach and attach again: xdpdrop detach --iface veth0; xdpdrop drop --iface veth0 --rules FILE"
	if !errors.Is(got, fastdrop.ErrOtherLayout) || got.Error() != want {
		t.Errorf("got %v\nwant %s", got, want)
	}
	other := errors.New("fastdrop: open pinned map")
	if otherLayoutAdvice(other, "veth0") != other || otherLayoutAdvice(nil, "veth0") != nil {
		t.Error("other errors must pass unchanged")
	}
}
