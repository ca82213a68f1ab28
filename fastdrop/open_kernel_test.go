package fastdrop

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xdpdrop/xdpdrop/gen"
	"github.com/xdpdrop/xdpdrop/internal/frames"
)

// TestRuleCount: RuleCount reports the rules in force, from the pins
// alone, after changes by either engine.
func TestRuleCount(t *testing.T) {
	e := newTestEngine(t, testOptions)
	dir := pinEngine(t, e)
	count := func(want int) {
		t.Helper()
		n, err := RuleCount(dir)
		if err != nil {
			t.Fatalf("RuleCount: %v", err)
		}
		if n != want {
			t.Errorf("RuleCount = %d, want %d", n, want)
		}
	}
	count(0)
	mustApply(t, e, kParse(t, "drop udp dport 53\ndrop src 10.0.0.0/8\npass src 10.1.0.0/16\ndrop src 2001:db8::/32\npass tcp dport 22\n"))
	count(5)
	o, err := Open(dir)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer o.Close()
	if err := o.Add(kParse(t, "drop src 192.0.2.1\ndrop icmp").Rules...); err != nil {
		t.Fatal(err)
	}
	count(7)
	if err := o.Delete(kParse(t, "drop src 2001:db8::/32").Rules[0]); err != nil {
		t.Fatal(err)
	}
	count(6)
	if _, err := RuleCount(filepath.Join(dir, "nothing")); err == nil {
		t.Error("RuleCount of a directory without pins: no error")
	}
}

// TestOpenReordered: a rule set whose order is not the order of its
// counter slots (rules kept, moved by a new set) reads back in rule-set
// order, and a change made through Open before anything was read keeps
// the program and the first engine in step.
func TestOpenReordered(t *testing.T) {
	e := newTestEngine(t, testOptions)
	mustApply(t, e, kParse(t, "drop src 10.0.0.0/8\npass src 10.1.0.0/16\ndrop udp dport 53\npass tcp dport 22\ndrop src 2001:db8::/32\n"))
	mustApply(t, e, kParse(t, "drop src 2001:db8::/32\npass tcp dport 22\npass src 10.1.0.0/16\ndrop udp dport 53\ndrop src 10.0.0.0/8\n"))
	dir := pinEngine(t, e)

	o, err := Open(dir)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer o.Close()
	if err := o.Add(kParse(t, "drop src 10.1.2.3").Rules[0]); err != nil {
		t.Fatalf("Add through Open: %v", err)
	}
	want, err := e.RuleSet()
	if err != nil {
		t.Fatal(err)
	}
	got, err := o.RuleSet()
	if err != nil {
		t.Fatal(err)
	}
	if ruleSetText(got) != ruleSetText(want) {
		t.Errorf("reopened rule set:\n%s\nwant:\n%s", ruleSetText(got), ruleSetText(want))
	}
	if len(got.Rules) != 6 || got.Rules[1].String() != "pass tcp dport 22" || got.Rules[3].String() != "drop udp dport 53" {
		t.Errorf("reopened rule set not in the order applied:\n%s", ruleSetText(got))
	}
	r, m := newRunner(e), NewModel(want)
	for _, f := range [][]byte{
		frames.UDP4("10.1.2.3", "10.0.0.1", 1000, 53, 10).Bytes,
		frames.UDP4("10.1.2.4", "10.0.0.1", 1000, 54, 10).Bytes,
		frames.TCP4("10.9.9.9", "10.0.0.1", 1, 22, 0).Bytes,
		frames.UDP4("10.9.9.9", "10.0.0.1", 1, 80, 0).Bytes,
	} {
		res, err := r.run(f)
		if err != nil {
			t.Fatal(err)
		}
		if w := m.Eval(f); res.Result != w {
			t.Errorf("frame %x: kernel %v, model %v", f, res, w)
		}
	}
}

// TestOpenOtherVersion: maps pinned by an xdpdrop whose counters have
// another layout are refused with an error that says what to do.
func TestOpenOtherVersion(t *testing.T) {
	e := newTestEngine(t, testOptions)
	dir := pinEngine(t, e)
	// The layout before session 4: one counter slot per value.
	old, err := ebpf.NewMap(&ebpf.MapSpec{
		Type:       ebpf.Array,
		Flags:      unix.BPF_F_MMAPABLE,
		KeySize:    4,
		ValueSize:  uint32(counterSize),
		MaxEntries: uint32(e.ncpu * e.nslots),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	path := filepath.Join(dir, gen.FastdropMapFdCounters)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := old.Pin(path); err != nil {
		t.Fatal(err)
	}
	o, err := Open(dir)
	if err == nil {
		o.Close()
		t.Fatal("Open of maps with the old counter layout: no error")
	}
	want := fmt.Sprintf("were pinned by another version of xdpdrop (layout %d, this one %d: map fd_counters holds", layoutVersion, layoutVersion)
	if !errors.Is(err, ErrOtherLayout) || !strings.Contains(err.Error(), want) || !strings.HasSuffix(err.Error(), "; detach and attach again") {
		t.Errorf("Open: %v, want ErrOtherLayout, %q and what to do", err, want)
	}
}

// TestOpenOtherStamp: maps stamped with another layout version, or not
// stamped at all (an xdpdrop from before the stamp), are refused by Open
// and RuleCount with an error that says so and what to do; the current
// stamp opens.
func TestOpenOtherStamp(t *testing.T) {
	e := newTestEngine(t, testOptions)
	if err := e.Add(mustParse(t, "drop src 192.0.2.0/24\n").Rules...); err != nil {
		t.Fatal(err)
	}
	dir := pinEngine(t, e)
	cur := currentStamp()
	if cur.LayoutVersion != uint32(gen.FastdropFdLayoutFD_LAYOUT_VERSION) || cur.LayoutVersion == 0 {
		t.Fatalf("current stamp %+v", cur)
	}
	for _, tc := range []struct {
		name  string
		stamp gen.FastdropFdStamp
		want  string
	}{
		{"other version", gen.FastdropFdStamp{LayoutVersion: cur.LayoutVersion + 1, RecSize: cur.RecSize, ConfSize: cur.ConfSize, HalfSize: cur.HalfSize},
			fmt.Sprintf("were pinned by another version of xdpdrop (layout %d, this one %d); detach and attach again", cur.LayoutVersion+1, cur.LayoutVersion)},
		{"unstamped", gen.FastdropFdStamp{},
			fmt.Sprintf("were pinned by another version of xdpdrop (layout 0, this one %d); detach and attach again", cur.LayoutVersion)},
		{"other record size", gen.FastdropFdStamp{LayoutVersion: cur.LayoutVersion, RecSize: 80, ConfSize: cur.ConfSize, HalfSize: cur.HalfSize},
			fmt.Sprintf("(layout %d, this one %d: records, configuration and half of 80, ", cur.LayoutVersion, cur.LayoutVersion)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := writeStamp(e.mem.ctl, tc.stamp); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if err := writeStamp(e.mem.ctl, cur); err != nil {
					t.Fatal(err)
				}
			})
			o, err := Open(dir)
			if err == nil {
				o.Close()
				t.Fatal("Open: no error")
			}
			if !errors.Is(err, ErrOtherLayout) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), dir) {
				t.Errorf("Open: %v\nwant ErrOtherLayout, the directory and %q", err, tc.want)
			}
			if _, err := RuleCount(dir); !errors.Is(err, ErrOtherLayout) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("RuleCount: %v\nwant ErrOtherLayout and %q", err, tc.want)
			}
		})
	}
	o, err := Open(dir)
	if err != nil {
		t.Fatalf("Open with the current stamp: %v", err)
	}
	defer o.Close()
	if n, err := RuleCount(dir); err != nil || n != 1 {
		t.Errorf("RuleCount = %d, %v; want 1", n, err)
	}
}

// TestOpenLists: rules whose value lists, negated lists and comparisons
// their records cannot hold read back from the pins exactly as written
// (the lists in fd_rule_lists), after Add and Delete through a second
// engine; entries of removed rules are deleted, and a slot reused by a
// rule without lists leaves none behind.
func TestOpenLists(t *testing.T) {
	e := newTestEngine(t, testOptions)
	text := "drop udp dport 53,123,161,1900,11211\n" +
		"drop tcp dport !22,443 dst 192.0.2.0/24\n" +
		"pass udp port <1024 len 64,1500-1600\n" +
		"drop icmp type echo-request,echo-reply code !1 ttl 1,2,250-255\n" +
		"drop dscp ef,af41,0-3 queue 0,2\n" +
		"drop udp dport 53 ttl <3\n" +
		"drop src 10.0.0.0/8\n"
	mustApply(t, e, kParse(t, text))
	dir := pinEngine(t, e)
	o, err := Open(dir)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer o.Close()
	got, err := o.RuleSet()
	if err != nil {
		t.Fatal(err)
	}
	if g := ruleSetText(got); g != ruleSetText(kParse(t, text)) {
		t.Errorf("reopened:\n%s\nwant:\n%s", g, text)
	}
	entries := func() int {
		t.Helper()
		n := 0
		var k uint32
		var v [listsSize]byte
		it := e.maps[gen.FastdropMapFdRuleLists].Iterate()
		for it.Next(&k, &v) {
			n++
		}
		if err := it.Err(); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := entries(); n != 5 {
		t.Errorf("fd_rule_lists holds %d entries, want 5 (the rules with lists, not those the record holds)", n)
	}
	if err := o.Delete(kParse(t, "drop udp dport 53,123,161,1900,11211").Rules[0]); err != nil {
		t.Fatal(err)
	}
	if err := o.Add(kParse(t, "drop udp dport 7,9\ndrop tcp sport 1").Rules...); err != nil {
		t.Fatal(err)
	}
	// A third reader sees what the second wrote.
	o2, err := Open(dir)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer o2.Close()
	got, err = o2.RuleSet()
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Replace(text, "drop udp dport 53,123,161,1900,11211\n", "", 1)
	if g := ruleSetText(got); !strings.Contains(g, "drop udp dport 7,9") || !strings.Contains(g, "drop tcp sport 1") || strings.Contains(g, "11211") {
		t.Errorf("after Delete and Add:\n%s\nwant the rules of:\n%s and drop udp dport 7,9, drop tcp sport 1", g, want)
	}
	// Replace everything by rules without lists: entries go, at the
	// latest once the removed records' slots are freed.
	mustApply(t, o2, kParse(t, "drop udp dport 53\n"))
	mustApply(t, o2, kParse(t, "drop udp dport 54\n"))
	if n := entries(); n != 0 {
		t.Errorf("fd_rule_lists holds %d entries after the rules with lists are gone, want 0", n)
	}
}

// TestOpenWritten: a rule set read back from the pins by another engine
// has each compound rule's text exactly as written (fd_rule_text holds the
// text of those written otherwise than their canonical form, and only
// theirs); an entry goes with its rule; a rule written otherwise is
// another rule (its own record and text).
func TestOpenWritten(t *testing.T) {
	e := newTestEngine(t, testOptions)
	written := []string{
		"drop dport 80 tcp flags !ack,syn",
		"drop proto 6 dscp ef",
		"drop udp dport 53,123 ttl <3", // canonical already
		"limit 1k/s burst 100 per src udp",
		"drop dst 0:0:db8::/48/32 udp",
		"drop icmp code 0 type echo-request",
	}
	text := strings.Join(written, "  # comment\n") + "\ndrop src 10.0.0.0/8\n"
	mustApply(t, e, kParse(t, text))
	entries := func() int {
		t.Helper()
		n := 0
		var k uint32
		v := make([]byte, textSize)
		it := e.maps[gen.FastdropMapFdRuleText].Iterate()
		for it.Next(&k, &v) {
			n++
		}
		if err := it.Err(); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := entries(); n != 5 {
		t.Errorf("fd_rule_text holds %d entries, want 5 (the rules not written in canonical form)", n)
	}
	dir := pinEngine(t, e)
	o, err := Open(dir)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer o.Close()
	rs, err := o.RuleSet()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for i := range rs.Rules {
		got = append(got, rs.Rules[i].Written())
	}
	want := append(slices.Clone(written), "drop src 10.0.0.0/8")
	if !slices.Equal(got, want) {
		t.Errorf("reopened, as written:\n%q\nwant\n%q", got, want)
	}
	// The same rule written otherwise replaces it (new record and text);
	// written in canonical form, it leaves no entry.
	mustApply(t, o, kParse(t, "drop tcp flags syn,!ack dport 80\ndrop proto tcp dscp ef\n"))
	rs, err = o.RuleSet()
	if err != nil {
		t.Fatal(err)
	}
	if len(rs.Rules) != 2 || rs.Rules[0].Written() != "drop tcp flags syn,!ack dport 80" || rs.Rules[1].Written() != "drop proto tcp dscp ef" {
		t.Errorf("after Apply: %q, %q", rs.Rules[0].Written(), rs.Rules[1].Written())
	}
	mustApply(t, o, kParse(t, "drop udp dport 54\n"))
	if n := entries(); n != 0 {
		t.Errorf("fd_rule_text holds %d entries after the rules written otherwise are gone, want 0", n)
	}
}
