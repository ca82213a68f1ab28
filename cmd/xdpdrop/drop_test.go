package main

import (
	"errors"
	"os"
	"path/filepath"
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
				p, _ := parsePrefix(d)
				whole.Rules = append(whole.Rules, fastdrop.Rule{Action: fastdrop.ActionDrop, Src: p})
			}
			if werr := whole.Validate(); werr == nil || werr.Error() != err.Error() {
				t.Errorf("error %q, Validate says %v", err, werr)
			}
		})
	}
}
