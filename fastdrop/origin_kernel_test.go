package fastdrop

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/xdpdrop/xdpdrop/internal/frames"
)

// originTexts is each origin's rules of rs: the compound rules in their
// order, then the prefix rules sorted (their order means nothing).
func originTexts(rs *RuleSet) map[string]string {
	comp, pfx := map[string][]string{}, map[string][]string{}
	for _, r := range rs.Rules {
		if r.IsPrefixOnly() {
			pfx[r.Origin] = append(pfx[r.Origin], r.String())
		} else {
			comp[r.Origin] = append(comp[r.Origin], r.String())
		}
	}
	out := map[string]string{}
	for o, c := range comp {
		out[o] = strings.Join(c, "\n")
	}
	for o, p := range pfx {
		slices.Sort(p)
		out[o] += "\n--\n" + strings.Join(p, "\n")
	}
	return out
}

// TestApplyOriginIncremental: ApplyOrigin changes one origin's rules by
// adding and removing only what changed (kept rules keep their counter
// slots), puts the origin's compound rules in exactly the order given
// (kept ones reordered, new ones between them), leaves every other
// origin's rules as they were, and the kernel agrees with a model of the
// result; a second engine opened from the pins reads back the same rule
// set (the order is in the records and the compound list).
func TestApplyOriginIncremental(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, testOptions)
	dir := pinEngine(t, e)
	g := newDiffGen(*diffSeed + 7)
	origins := []string{"", "agent:file", "agent:flowspec", OriginRedirect}
	// Start with a mixed set of every origin.
	rs := g.ruleSet(40, 80)
	for i := range rs.Rules {
		rs.Rules[i].Origin = origins[g.rng.IntN(len(origins))]
	}
	mustApply(t, e, rs)
	ops := 120
	if testing.Short() {
		ops = 30
	}
	incremental, reordered := 0, 0
	for op := range ops {
		before, err := e.RuleSet()
		if err != nil {
			t.Fatal(err)
		}
		origin := origins[g.rng.IntN(len(origins))]
		var mine []Rule
		slotOf := map[string]uint32{}
		for i, r := range before.Rules {
			if r.Origin == origin {
				mine = append(mine, r)
				slotOf[r.String()] = e.slots[i]
			}
		}
		// The origin's new rules: some kept, some dropped, some new ones
		// anywhere, sometimes the compound ones shuffled.
		var next []Rule
		for _, r := range mine {
			if g.rng.IntN(5) != 0 {
				next = append(next, r)
			}
		}
		for range g.rng.IntN(6) {
			var r Rule
			if g.rng.IntN(2) == 0 {
				r = g.compound()
			} else {
				r = Rule{Action: Action(1 + g.rng.IntN(2)), Src: g.prefix(g.rng.IntN(2) == 0)}
			}
			at := g.rng.IntN(len(next) + 1)
			next = slices.Insert(next, at, r)
		}
		if g.rng.IntN(4) == 0 {
			g.rng.Shuffle(len(next), func(i, j int) { next[i], next[j] = next[j], next[i] })
		}
		want := &RuleSet{Rules: slices.Clone(next)}
		for i := range want.Rules {
			want.Rules[i].Origin = origin
		}
		wantTexts := originTexts(before)
		delete(wantTexts, origin)
		for o, s := range originTexts(want) {
			wantTexts[o] = s
		}
		p := e.planOriginForTest(origin, want.Rules)
		if p != nil {
			incremental++
			if p.recompile {
				reordered++
			}
		}
		gen0 := e.generation
		err = e.ApplyOrigin(origin, &RuleSet{Rules: next})
		if errors.Is(err, ErrDuplicatePrefix) || errors.Is(err, ErrTooManyRules) {
			now, _ := e.RuleSet()
			if ruleSetText(now) != ruleSetText(before) {
				t.Fatalf("op %d: a refused ApplyOrigin (%v) changed the rules:\n%s\nwas:\n%s", op, err, ruleSetText(now), ruleSetText(before))
			}
			continue
		}
		if err != nil {
			t.Fatalf("op %d: ApplyOrigin(%q): %v", op, origin, err)
		}
		// One swap: the old rules or the new, never both.
		if e.generation != gen0+1 {
			t.Fatalf("op %d: ApplyOrigin made %d generations, want 1 swap", op, e.generation-gen0)
		}
		now, err := e.RuleSet()
		if err != nil {
			t.Fatal(err)
		}
		if got := originTexts(now); fmt.Sprint(got) != fmt.Sprint(wantTexts) {
			t.Fatalf("op %d: ApplyOrigin(%q) left\n%v\nwant\n%v", op, origin, got, wantTexts)
		}
		// Kept rules keep their slots (and so their counters).
		for i, r := range now.Rules {
			if s, ok := slotOf[r.String()]; ok && r.Origin == origin && countText(mine, r) == 1 && countText(next, r) == 1 && e.slots[i] != s {
				t.Fatalf("op %d (incremental %v): kept rule %s moved from slot %d to %d", op, p != nil, r, s, e.slots[i])
			}
		}
		o, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		reread, err := o.RuleSet()
		o.Close()
		if err != nil {
			t.Fatal(err)
		}
		if got := originTexts(reread); fmt.Sprint(got) != fmt.Sprint(wantTexts) {
			t.Fatalf("op %d: reopened engine reads\n%v\nwant\n%v", op, got, wantTexts)
		}
		r, m := newRunner(e), NewModel(now)
		for range 200 {
			frame := g.frame()
			msg, err := diffCheck(r, m, frame)
			if err != nil {
				t.Fatalf("frame %x: %v", frame, err)
			}
			if msg != "" {
				t.Fatalf("after op %d (ApplyOrigin %q): %s\nframe %x\nrules:\n%s", op, origin, msg, frame, ruleSetText(now))
			}
		}
	}
	t.Logf("%d of %d changes incremental, %d of them reordering compound rules", incremental, ops, reordered)
	if incremental == 0 || reordered == 0 {
		t.Errorf("incremental %d, reordered %d: the test did not reach both paths", incremental, reordered)
	}
}

func countText(rules []Rule, r Rule) int {
	n := 0
	for _, x := range rules {
		if x.String() == r.String() {
			n++
		}
	}
	return n
}

// planOriginForTest is planOrigin under the engine's lock, changing
// nothing.
func (e *Engine) planOriginForTest(origin string, rules []Rule) *plan {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.planOrigin(origin, rules, e.policy, e.malformed)
}

// TestReaderDuringChange: a process that only reads the rule set (rules
// list, stats, the agent looking at what is in force) while another
// makes a change sees the records of the change's new rules, of a
// generation not in force yet, and must leave them: they are no leftover
// of a change that did not finish. (Freeing them took the new rule's
// record and counters away under the change: the rule was in force in
// the program, but listed nowhere, and the next change lost it.) The
// reader's own next change frees real leftovers, under the lock.
func TestReaderDuringChange(t *testing.T) {
	e := newTestEngine(t, testOptions)
	dir := pinEngine(t, e)
	mustApply(t, e, kParse(t, "drop udp dport 1\n"))
	reader, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	var during string
	e.publishHook = func() {
		rs, err := reader.RuleSet()
		if err != nil {
			t.Errorf("reader during the change: %v", err)
			return
		}
		during = ruleSetText(rs)
	}
	if err := e.ApplyOrigin("agent:file", kParse(t, "drop udp dport 2\n")); err != nil {
		t.Fatal(err)
	}
	e.publishHook = nil
	if during == "" || strings.Contains(during, "dport 2") {
		t.Fatalf("the reader did not read in the middle of the change (it saw %q)", during)
	}
	send(t, e, frames.UDP4("10.0.0.1", "10.0.0.2", 9, 2, 0).Bytes, 3)
	fresh, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	if c := ruleCount(t, counters(t, fresh), "drop udp dport 2"); c.Packets != 3 {
		t.Errorf("the new rule after a read during its change: %d packets, want 3", c.Packets)
	}
	if c := ruleCount(t, counters(t, reader), "drop udp dport 2"); c.Packets != 3 {
		t.Errorf("the reader, after the change: %d packets, want 3", c.Packets)
	}
	if err := reader.Add(kParse(t, "drop udp dport 3\n").Rules[0]); err != nil {
		t.Fatal(err)
	}
	rs, err := fresh.RuleSet()
	if err != nil {
		t.Fatal(err)
	}
	if got := ruleSetText(rs); !strings.Contains(got, "dport 1") || !strings.Contains(got, "dport 2") || !strings.Contains(got, "dport 3") {
		t.Errorf("after the reader's own change:\n%s", got)
	}

	// A real leftover (a record of a generation that never came, as a
	// change killed half-way leaves): a reader leaves it and does not list
	// it; the next change, under the lock, frees it.
	leftover := kParse(t, "drop udp dport 4\n").Rules[0]
	slot := uint32(e.nslots - 1)
	if err := e.writeRecords([]recWrite{{slot: slot, rule: &leftover, order: 99, added: uint32(e.generation + 5)}}); err != nil {
		t.Fatal(err)
	}
	recAt := func() byte {
		b := make([]byte, recSize)
		if _, err := e.mem.rules.ReadAt(b, int64(slot)*int64(recSize)); err != nil {
			t.Fatal(err)
		}
		return b[recAction]
	}
	other, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	rs, err = other.RuleSet()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(ruleSetText(rs), "dport 4") || recAt() == 0 {
		t.Fatalf("a reader listed the leftover or freed it: %v, record action %d", ruleSetText(rs), recAt())
	}
	if err := other.Delete(kParse(t, "drop udp dport 3\n").Rules[0]); err != nil {
		t.Fatal(err)
	}
	if recAt() != 0 {
		t.Error("the next change left the leftover record")
	}
}
