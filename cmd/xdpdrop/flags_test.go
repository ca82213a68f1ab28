package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestNumericFlagsRefused: counts that cannot be meant are usage errors
// (exit 2) with what is wanted, before anything is opened.
func TestNumericFlagsRefused(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"stats", "--top", "-1"}, "xdpdrop: --top -1: want 0 (all rules) or more\n"},
		{[]string{"stats", "--top", "-20", "--watch"}, "xdpdrop: --top -20: want 0 (all rules) or more\n"},
		{[]string{"exporter", "--metrics", "127.0.0.1:0", "--max-rule-series", "-5"}, "xdpdrop: --max-rule-series -5: want 1 or more\n"},
		{[]string{"exporter", "--metrics", "127.0.0.1:0", "--max-rule-series", "0"}, "xdpdrop: --max-rule-series 0: want 1 or more\n"},
		{[]string{"gen", "--iface", "x", "--call-time", "500us"}, "xdpdrop: --call-time 500µs: want 1ms to 10s, or 0 for the default\n"},
		{[]string{"gen", "--iface", "x", "--call-time", "11s"}, "xdpdrop: --call-time 11s: want 1ms to 10s, or 0 for the default\n"},
		{[]string{"gen", "--iface", "x", "--call-time", "-1s"}, "xdpdrop: --call-time -1s: want 1ms to 10s, or 0 for the default\n"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := run(context.Background(), tc.args, &out, &errb); code != exitUsage {
				t.Errorf("exit code %d, want %d; stderr %q", code, exitUsage, errb.String())
			}
			if !strings.HasPrefix(errb.String(), tc.want) {
				t.Errorf("stderr %q, want %q first", errb.String(), tc.want)
			}
		})
	}
}
