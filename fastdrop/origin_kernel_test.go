package fastdrop

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
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
