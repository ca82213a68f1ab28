package fastdrop

import (
	"errors"
	"strings"
	"testing"
)

// TestCapacityLimits: the limits of one program (measured: 2^25 counter
// slots and 2^24 IPv6 entries load, one more is refused by the verifier)
// are checked before anything is loaded, and CapacityFor gives a set near
// them less room to grow instead of tables the program cannot have.
func TestCapacityLimits(t *testing.T) {
	if MaxRules != 16_777_208 || MaxIPv6Entries != 16_777_216 {
		t.Fatalf("MaxRules %d, MaxIPv6Entries %d", MaxRules, MaxIPv6Entries)
	}
	// New refuses before loading: a load would fail in the verifier
	// ("unbounded memory access", EACCES), not with ErrCapacity.
	for _, tc := range []struct {
		o    Options
		want string
	}{
		{Options{MaxRules: MaxRules + 1}, "fastdrop: room for 16777209 rules asked: capacity exceeded: one fast-drop program holds at most 16777208"},
		{Options{IPv6Entries: MaxIPv6Entries + 1}, "fastdrop: an IPv6 table of 33554432 entries asked: capacity exceeded: one fast-drop program has at most 16777216"},
		{capacityFor(MaxRules+1, 0, 0, 0, 2), "fastdrop: 16777209 rules: capacity exceeded: one fast-drop program holds at most 16777208 rules; aggregate adjacent prefixes into shorter ones"},
		{capacityFor(9_400_000, 9_400_000, 0, 0, 2), "fastdrop: 9400000 IPv6 prefix rules: capacity exceeded: one fast-drop program holds about 9320106 (its IPv6 table has 16777216 entries, for the prefixes and their search markers); aggregate"},
	} {
		e, err := New(tc.o)
		if err == nil {
			e.Close()
			t.Errorf("New(%+v) loaded", tc.o)
			continue
		}
		if !errors.Is(err, ErrCapacity) || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("New(%+v): %v\nwant ErrCapacity, %q...", tc.o, err, tc.want)
		}
	}
	// Near the limits: the room to grow shrinks, the set still fits.
	for _, tc := range []struct {
		name     string
		o        Options
		rules    int
		v6       int
		wantRule int
		wantV6   int
	}{
		{"10M rules", capacityFor(10_000_000, 0, 0, 0, 2), 10_000_000, 0, MaxRules, 1024},
		{"all the rules", capacityFor(MaxRules, 0, 0, 0, 2), MaxRules, 0, MaxRules, 1024},
		{"9M IPv6", capacityFor(9_000_000, 9_000_000, 0, 0, 2), 9_000_000, 9_000_000, MaxRules, MaxIPv6Entries},
		{"1M with room", capacityFor(1_000_000, 1_000_000, 0, 0, 2), 1_000_000, 1_000_000, 2_001_024, 1 << 22},
	} {
		if err := tc.o.check(); err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
		if tc.o.MaxRules != tc.wantRule || tc.o.IPv6Entries != tc.wantV6 {
			t.Errorf("%s: MaxRules %d, IPv6Entries %d; want %d, %d", tc.name, tc.o.MaxRules, tc.o.IPv6Entries, tc.wantRule, tc.wantV6)
		}
	}
}
