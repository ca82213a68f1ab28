package fastdrop

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdpdrop/xdpdrop/gen"
	"github.com/xdpdrop/xdpdrop/internal/frames"
	"github.com/xdpdrop/xdpdrop/internal/testenv"
)

// TestDstPrefixTable runs frames through the program (Tester) against
// destination prefix rules: "drop dst P" and "pass dst P" are prefix rules
// of the destination table, the longest destination prefix decides
// (IPv4 through every form of DIR-24-8: a tbl24 entry, a sparse group of
// host routes, a tbl8 group; IPv6 through the hash table), before the
// source table and after the compound rules, and each rule counts its
// own frames.
func TestDstPrefixTable(t *testing.T) {
	testenv.RequireRoot(t)
	rules := `policy pass
drop udp dport 53
drop dst 10.1.0.0/16
pass dst 10.1.2.0/24
drop dst 10.1.2.3
drop dst 10.9.0.0/25
pass dst 10.9.0.64/26
drop src 192.0.2.0/24
drop dst 2001:db8:1::/48
pass dst 2001:db8:1:2::/64
drop dst 2001:db8:1:2::9/128
pass src 2001:db8:77::/48
`
	rs, err := Parse(strings.NewReader(rules), "t.rules")
	require.NoError(t, err)
	for i, r := range rs.Rules {
		require.Equal(t, i != 0, r.IsPrefixOnly(), "rule %d (%s) is a prefix rule", i, r)
	}
	tt, err := NewTester(rs)
	require.NoError(t, err)
	defer tt.Close()
	m := NewModel(rs)
	for _, tc := range []struct {
		name  string
		frame []byte
		want  Result
	}{
		{"compound first", frames.UDP4("198.51.100.1", "10.1.2.9", 1, 53, 18).Bytes, Result{ActionDrop, ClassCompound, 0}},
		{"dst /16", frames.TCP4("198.51.100.1", "10.1.5.5", 1, 80, 0).Bytes, Result{ActionDrop, ClassPrefix, 1}},
		{"dst /24 in /16", frames.TCP4("198.51.100.1", "10.1.2.9", 1, 80, 0).Bytes, Result{ActionPass, ClassPrefix, 2}},
		{"dst host (sparse group)", frames.TCP4("198.51.100.1", "10.1.2.3", 1, 80, 0).Bytes, Result{ActionDrop, ClassPrefix, 3}},
		{"dst /25 (tbl8 group)", frames.TCP4("198.51.100.1", "10.9.0.5", 1, 80, 0).Bytes, Result{ActionDrop, ClassPrefix, 4}},
		{"dst /26 in /25", frames.TCP4("198.51.100.1", "10.9.0.70", 1, 80, 0).Bytes, Result{ActionPass, ClassPrefix, 5}},
		{"dst before src", frames.TCP4("192.0.2.7", "10.1.2.9", 1, 80, 0).Bytes, Result{ActionPass, ClassPrefix, 2}},
		{"src when no dst", frames.TCP4("192.0.2.7", "203.0.113.1", 1, 80, 0).Bytes, Result{ActionDrop, ClassPrefix, 6}},
		{"a dst prefix is not a src prefix", frames.TCP4("10.1.5.5", "203.0.113.1", 1, 80, 0).Bytes, Result{ActionPass, ClassDefault, -1}},
		{"dst /48", frames.TCP6("2001:db8::5", "2001:db8:1:7::1", 1, 80, 0).Bytes, Result{ActionDrop, ClassPrefix, 7}},
		{"dst /64 in /48", frames.TCP6("2001:db8::5", "2001:db8:1:2::1", 1, 80, 0).Bytes, Result{ActionPass, ClassPrefix, 8}},
		{"dst /128", frames.TCP6("2001:db8::5", "2001:db8:1:2::9", 1, 80, 0).Bytes, Result{ActionDrop, ClassPrefix, 9}},
		{"IPv6 dst before src", frames.TCP6("2001:db8:77::1", "2001:db8:1:7::1", 1, 80, 0).Bytes, Result{ActionDrop, ClassPrefix, 7}},
		{"IPv6 src when no dst", frames.TCP6("2001:db8:77::1", "2001:db8:5::1", 1, 80, 0).Bytes, Result{ActionPass, ClassPrefix, 10}},
		{"default", frames.TCP6("2001:db8::5", "2001:db8:5::1", 1, 80, 0).Bytes, Result{ActionPass, ClassDefault, -1}},
	} {
		got, err := tt.Test(tc.frame)
		require.NoError(t, err, tc.name)
		require.Equal(t, tc.want, got, tc.name)
		require.Equal(t, m.Eval(tc.frame), got, "%s: the kernel agrees with the model", tc.name)
	}
	c, err := tt.Counters()
	require.NoError(t, err)
	want := []uint64{1, 1, 2, 1, 1, 1, 1, 2, 1, 1, 1}
	for i, rc := range c.Rules {
		require.Equal(t, want[i], rc.Packets, "rule %d (%s) counted", i, rc.Rule)
	}
	require.NotZero(t, activeFeatures(t, tt.Engine())&uint32(gen.FastdropFdLayoutFD_FEAT_DST), "FD_FEAT_DST set")
}

// TestDstPrefixChanges: destination prefix rules added and removed one by
// one (the table changed in place), their counters kept across other
// changes, the feature bit off again once none is left, and a program
// loaded without the table refusing them with ErrCapacity.
func TestDstPrefixChanges(t *testing.T) {
	opts := testOptions
	opts.DstPrefixes = true
	e := newTestEngine(t, opts)
	mustApply(t, e, kParse(t, "drop src 192.0.2.0/24\ndrop udp dport 53"))
	require.Zero(t, activeFeatures(t, e), "no destination prefix rule: the plain path")
	to := func(dst string) []byte { return frames.TCP4("198.51.100.1", dst, 1, 80, 0).Bytes }
	verdict := func(dst string) Action {
		t.Helper()
		got, err := newRunner(e).run(to(dst))
		require.NoError(t, err)
		return got.Verdict
	}
	d := func(s string) Rule {
		r := kParse(t, s).Rules[0]
		r.Line = 0
		return r
	}
	require.NoError(t, e.Add(d("drop dst 10.1.0.0/16"), d("pass dst 10.1.2.3")))
	require.Equal(t, ActionDrop, verdict("10.1.9.9"))
	require.Equal(t, ActionPass, verdict("10.1.2.3"))
	require.NotZero(t, activeFeatures(t, e)&uint32(gen.FastdropFdLayoutFD_FEAT_DST))
	// Many host routes, as a detector announces victims.
	var hosts []Rule
	for i := range 1000 {
		hosts = append(hosts, d(fmt.Sprintf("drop dst 10.%d.%d.%d", 20+i/65536, i/256%256, i%256)))
	}
	require.NoError(t, e.Add(hosts...))
	require.Equal(t, ActionDrop, verdict("10.20.3.231"))
	require.Equal(t, ActionPass, verdict("10.20.3.232"))
	c, err := e.Counters()
	require.NoError(t, err)
	var hit uint64
	for _, rc := range c.Rules {
		if rc.Rule.Dst == netip.MustParsePrefix("10.20.3.231/32") {
			hit = rc.Packets
		}
	}
	require.Equal(t, uint64(1), hit, "the host route counted its frame")
	require.NoError(t, e.Delete(hosts[1:]...))
	c, err = e.Counters()
	require.NoError(t, err)
	for _, rc := range c.Rules {
		if rc.Rule.Dst == netip.MustParsePrefix("10.20.3.231/32") {
			t.Fatalf("deleted rule still in force: %v", rc.Rule)
		}
	}
	require.Equal(t, ActionPass, verdict("10.20.3.231"))
	require.Equal(t, ActionDrop, verdict("10.20.0.0"), "the first host route kept")
	require.NoError(t, e.Delete(hosts[0], d("drop dst 10.1.0.0/16"), d("pass dst 10.1.2.3")))
	require.Equal(t, ActionPass, verdict("10.1.9.9"))
	require.Zero(t, activeFeatures(t, e), "none left: the plain path again")

	// Without the table.
	plain := newTestEngine(t, testOptions)
	err = plain.Add(d("drop dst 10.1.0.0/16"))
	require.ErrorIs(t, err, ErrCapacity)
	require.Contains(t, err.Error(), "without a destination prefix table")
	err = plain.Apply(kParse(t, "drop dst 2001:db8::/32"))
	require.ErrorIs(t, err, ErrCapacity)
	require.True(t, CapacityFor(kParse(t, "drop dst 2001:db8::/32"), 1).DstPrefixes)
	require.False(t, CapacityFor(kParse(t, "drop src 2001:db8::/32\ndrop tcp dst 10.0.0.0/8"), 1).DstPrefixes)
}

// TestDstPrefixDuplicates: a destination prefix at most once among the
// destination prefix rules, as a source prefix among the source ones;
// the same prefix as a source and a destination is two rules.
func TestDstPrefixDuplicates(t *testing.T) {
	_, err := Parse(strings.NewReader("drop dst 10.0.0.0/8\npass dst 10.0.0.0/8\n"), "t.rules")
	require.ErrorIs(t, err, ErrDuplicatePrefix)
	rs, err := Parse(strings.NewReader("drop dst 10.0.0.0/8\npass src 10.0.0.0/8\n"), "t.rules")
	require.NoError(t, err)
	require.NoError(t, rs.Validate())
	require.Equal(t, PrefixKey{Prefix: netip.MustParsePrefix("10.0.0.0/8"), Dst: true}, rs.Rules[0].PrefixKey())
	require.Equal(t, "dst 10.0.0.0/8", rs.Rules[0].PrefixKey().String())
	opts := testOptions
	opts.DstPrefixes = true
	e := newTestEngine(t, opts)
	mustApply(t, e, rs)
	err = e.Add(Rule{Action: ActionPass, Dst: netip.MustParsePrefix("10.0.0.0/8")})
	require.ErrorIs(t, err, ErrDuplicatePrefix)
	require.Contains(t, err.Error(), "dst 10.0.0.0/8 is also rule 0")
}

// TestDstPrefixOpen: a later process (Open) reads destination prefix
// rules back from the pinned maps, with their counters, and changes the
// destination table in place (the mirrors rebuilt from the active half).
func TestDstPrefixOpen(t *testing.T) {
	opts := testOptions
	opts.DstPrefixes = true
	e := newTestEngine(t, opts)
	mustApply(t, e, kParse(t, "drop dst 10.1.0.0/16\npass dst 10.1.2.3\ndrop dst 2001:db8:1::/48\ndrop src 192.0.2.0/24\n"))
	v4 := frames.TCP4("198.51.100.1", "10.1.9.9", 1, 80, 0).Bytes
	send(t, e, v4, 3)
	o, err := Open(pinEngine(t, e))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, o.Close()) })
	got, err := o.RuleSet()
	require.NoError(t, err)
	want, _ := e.RuleSet()
	require.Equal(t, ruleSetText(want), ruleSetText(got))
	require.Equal(t, uint64(3), ruleCount(t, counters(t, o), "drop dst 10.1.0.0/16").Packets)
	require.NoError(t, o.Add(kParse(t, "drop dst 10.1.2.4").Rules[0], kParse(t, "pass dst 2001:db8:1:2::/64").Rules[0]))
	require.NoError(t, o.Delete(kParse(t, "pass dst 10.1.2.3").Rules[0]))
	now, err := e.RuleSet()
	require.NoError(t, err)
	r, m := newRunner(e), NewModel(now)
	for _, f := range [][]byte{v4,
		frames.TCP4("198.51.100.1", "10.1.2.3", 1, 80, 0).Bytes,
		frames.TCP4("198.51.100.1", "10.1.2.4", 1, 80, 0).Bytes,
		frames.TCP6("2001:db8::5", "2001:db8:1:2::1", 1, 80, 0).Bytes,
		frames.TCP6("2001:db8::5", "2001:db8:1:3::1", 1, 80, 0).Bytes,
	} {
		got, err := r.run(f)
		require.NoError(t, err)
		require.Equal(t, m.Eval(f), got.Result, "frame %x", f)
	}
	require.Equal(t, ActionDrop, m.Eval(frames.TCP4("198.51.100.1", "10.1.2.3", 1, 80, 0).Bytes).Verdict)
	require.Equal(t, uint64(5), ruleCount(t, counters(t, e), "drop dst 10.1.0.0/16").Packets, "counters kept across the change (3 + 10.1.9.9 + 10.1.2.3)")
}
