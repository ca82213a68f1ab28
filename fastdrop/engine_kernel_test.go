package fastdrop

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"

	"github.com/xdpdrop/xdpdrop/gen"
	"github.com/xdpdrop/xdpdrop/internal/frames"
	"github.com/xdpdrop/xdpdrop/internal/testenv"
)

// testOptions keep kernel memory small: tests create many engines.
var testOptions = Options{MaxRules: 4096, IPv4Blocks: 256, IPv6Entries: 4096}

// newTestEngine loads the program with tracing on (each test run tells
// which stage and rule decided).
func newTestEngine(t testing.TB, opts Options) *Engine {
	t.Helper()
	testenv.RequireRoot(t)
	opts.trace = true
	e, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return e
}

// kernelResult is what a traced test run reports, in the Model's terms.
type kernelResult struct {
	Result
	xdp uint32 // the program's return value
}

func (r kernelResult) String() string {
	return fmt.Sprintf("%s/%s/rule %d (xdp %d)", r.Verdict, r.Class, r.Rule, r.xdp)
}

// runner runs frames through an engine's traced program and maps counter
// slots back to rule indices.
type runner struct {
	e      *Engine
	ruleOf map[uint32]int
	out    []byte
}

func newRunner(e *Engine) *runner {
	r := &runner{e: e, ruleOf: make(map[uint32]int), out: make([]byte, 4096)}
	for i, s := range e.slots {
		r.ruleOf[s] = i
	}
	return r
}

// run returns the kernel's decision for frame (at least 14 bytes: the
// test run refuses shorter frames).
func (r *runner) run(frame []byte) (kernelResult, error) { return r.runOn(frame, 0, 0) }

// runOn is run for a frame arriving on rx queue queue of the interface
// with index ifindex (0: none, queue 0).
func (r *runner) runOn(frame []byte, ifindex, queue int) (kernelResult, error) {
	opts := &ebpf.RunOptions{Data: frame, DataOut: r.out}
	if ifindex != 0 {
		opts.Context = xdpMD{DataEnd: uint32(len(frame)), IngressIfindex: uint32(ifindex), RxQueueIndex: uint32(queue)}
	}
	ret, err := r.e.prog.Run(opts)
	if err != nil {
		return kernelResult{}, fmt.Errorf("test run: %w", err)
	}
	tr := r.out[:8]
	if tr[0] != 0xfd {
		return kernelResult{}, errors.New("no trace record in the output frame")
	}
	var res kernelResult
	res.xdp = ret
	switch tr[1] {
	case 1:
		res.Verdict = ActionDrop
	case 2:
		res.Verdict = ActionPass
	default:
		res.Verdict = Action(100 + tr[1])
	}
	if uint32(tr[1]) != ret {
		return res, fmt.Errorf("trace says verdict %d, program returned %d", tr[1], ret)
	}
	res.Class = ResultClass(tr[2])
	res.Rule = -1
	val := uint32(tr[4]) | uint32(tr[5])<<8 | uint32(tr[6])<<16 | uint32(tr[7])<<24
	// Redirect: XDP_REDIRECT to a socket, or XDP_PASS with none bound.
	if valAction(val) == ActionRedirect && (ret == 2 || ret == 4) {
		res.Verdict = ActionRedirect
	}
	if res.Class == ClassCompound || res.Class == ClassPrefix {
		i, ok := r.ruleOf[valSlot(val)]
		if !ok {
			return res, fmt.Errorf("matched counter slot %d, which is no rule's", valSlot(val))
		}
		res.Rule = i
		if valAction(val) != res.Verdict {
			return res, fmt.Errorf("val action %s, verdict %s", valAction(val), res.Verdict)
		}
	}
	return res, nil
}

func kParse(t testing.TB, text string) *RuleSet {
	t.Helper()
	rs, err := Parse(strings.NewReader(text), "test.rules")
	if err != nil {
		t.Fatalf("parse rules: %v", err)
	}
	return rs
}

func mustApply(t testing.TB, e *Engine, rs *RuleSet) *runner {
	t.Helper()
	if err := e.Apply(rs); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	return newRunner(e)
}

func TestEngineSmoke(t *testing.T) {
	e := newTestEngine(t, testOptions)
	r := mustApply(t, e, kParse(t, `
drop udp dport 11211
drop src 192.0.2.0/24
pass src 192.0.2.128/25
drop src 2001:db8::/32
`))
	for _, tc := range []struct {
		name  string
		frame frames.Frame
		want  Result
	}{
		{"memcached", frames.UDP4("198.51.100.1", "10.0.0.1", 1000, 11211, 10), Result{ActionDrop, ClassCompound, 0}},
		{"prefix /24", frames.UDP4("192.0.2.1", "10.0.0.1", 1000, 53, 10), Result{ActionDrop, ClassPrefix, 1}},
		{"prefix /25", frames.UDP4("192.0.2.200", "10.0.0.1", 1000, 53, 10), Result{ActionPass, ClassPrefix, 2}},
		{"v6 prefix", frames.UDP6("2001:db8::1", "2001:db8::2", 1000, 53, 10), Result{ActionDrop, ClassPrefix, 3}},
		{"default", frames.UDP4("198.51.100.1", "10.0.0.1", 1000, 53, 10), Result{ActionPass, ClassDefault, -1}},
	} {
		got, err := r.run(tc.frame.Bytes)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got.Result != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

// send runs frame n times through the program (without looking at the
// result). Not with Repeat: a traced run moves the frame's start, and
// repeated runs see the moved frame.
func send(t testing.TB, e *Engine, frame []byte, n int) {
	t.Helper()
	out := make([]byte, 4096)
	for range n {
		if _, err := e.prog.Run(&ebpf.RunOptions{Data: frame, DataOut: out}); err != nil {
			t.Fatalf("test run: %v", err)
		}
	}
}

func counters(t testing.TB, e *Engine) *Counters {
	t.Helper()
	c, err := e.Counters()
	if err != nil {
		t.Fatalf("Counters: %v", err)
	}
	return c
}

// ruleCount returns the counter of the rule with text s.
func ruleCount(t testing.TB, c *Counters, s string) Counter {
	t.Helper()
	for _, rc := range c.Rules {
		if rc.Rule.String() == s {
			return rc.Counter
		}
	}
	t.Fatalf("no rule %q in the counters", s)
	return Counter{}
}

func TestCounters(t *testing.T) {
	e := newTestEngine(t, testOptions)
	mustApply(t, e, kParse(t, `
malformed drop
drop udp dport 53
pass tcp
drop src 192.0.2.0/24
drop src 2001:db8::/32
`))
	dns := frames.UDP4("198.51.100.1", "10.0.0.1", 1000, 53, 10).Bytes
	web := frames.TCP4("198.51.100.1", "10.0.0.1", 1000, 80, 0).Bytes
	v4 := spec4("192.0.2.9", "10.0.0.1", 47, 0, 0).Build().Bytes
	v6 := spec6("2001:db8::9", "2001:db8::1", 47, 0, 0).Build().Bytes
	other := spec4("198.51.100.1", "10.0.0.1", 47, 0, 0).Build().Bytes
	bad := frames.UDP4("198.51.100.1", "10.0.0.1", 1000, 53, 10).CorruptIPv4IHL(2).Bytes
	send(t, e, dns, 3)
	send(t, e, web, 5)
	send(t, e, v4, 7)
	send(t, e, v6, 11)
	send(t, e, other, 13)
	send(t, e, bad, 17)
	c := counters(t, e)
	want := []Counter{
		{3, 3 * uint64(len(dns))},
		{5, 5 * uint64(len(web))},
		{7, 7 * uint64(len(v4))},
		{11, 11 * uint64(len(v6))},
	}
	for i, w := range want {
		if c.Rules[i].Counter != w || c.Rules[i].Index != i {
			t.Errorf("rule %d (%s): %+v, want %+v", i, c.Rules[i].Rule, c.Rules[i], w)
		}
	}
	if w := (Counter{13, 13 * uint64(len(other))}); c.Default != w {
		t.Errorf("default: %+v, want %+v", c.Default, w)
	}
	if w := (Counter{17, 17 * uint64(len(bad))}); c.Malformed != w {
		t.Errorf("malformed: %+v, want %+v", c.Malformed, w)
	}
	dropped := Counter{3 + 7 + 11 + 17, 3*uint64(len(dns)) + 7*uint64(len(v4)) + 11*uint64(len(v6)) + 17*uint64(len(bad))}
	passed := Counter{5 + 13, 5*uint64(len(web)) + 13*uint64(len(other))}
	if c.Drop != dropped || c.Pass != passed {
		t.Errorf("verdicts: drop %+v pass %+v, want drop %+v pass %+v", c.Drop, c.Pass, dropped, passed)
	}
	// Verdict counts keep what removed rules counted.
	if err := e.Apply(kParse(t, "pass src 10.0.0.0/8")); err != nil {
		t.Fatal(err)
	}
	send(t, e, web, 1)
	c = counters(t, e)
	passed.add(Counter{1, uint64(len(web))})
	if c.Drop != dropped || c.Pass != passed {
		t.Errorf("verdicts after Apply: drop %+v pass %+v, want drop %+v pass %+v", c.Drop, c.Pass, dropped, passed)
	}
	if w := (Counter{14, 13*uint64(len(other)) + uint64(len(web))}); c.Default != w {
		t.Errorf("default after Apply: %+v, want %+v", c.Default, w)
	}
}

// TestCountersSurviveChanges: changing some rules keeps the others'
// counters; a rule that is removed and added again starts from zero.
func TestCountersSurviveChanges(t *testing.T) {
	e := newTestEngine(t, testOptions)
	mustApply(t, e, kParse(t, `
drop udp dport 53
drop tcp dport 80
drop src 192.0.2.0/24
drop src 2001:db8::/32
`))
	dns := frames.UDP4("198.51.100.1", "10.0.0.1", 1000, 53, 10).Bytes
	v4 := spec4("192.0.2.9", "10.0.0.1", 47, 0, 0).Build().Bytes
	v6 := spec6("2001:db8::9", "2001:db8::1", 47, 0, 0).Build().Bytes
	send(t, e, dns, 2)
	send(t, e, v4, 3)
	send(t, e, v6, 4)
	check := func(step string, wantDNS, wantV4, wantV6 uint64) {
		t.Helper()
		c := counters(t, e)
		if got := ruleCount(t, c, "drop udp dport 53").Packets; got != wantDNS {
			t.Errorf("%s: dns rule %d packets, want %d", step, got, wantDNS)
		}
		if got := ruleCount(t, c, "drop src 192.0.2.0/24").Packets; got != wantV4 {
			t.Errorf("%s: v4 prefix %d packets, want %d", step, got, wantV4)
		}
		if got := ruleCount(t, c, "drop src 2001:db8::/32").Packets; got != wantV6 {
			t.Errorf("%s: v6 prefix %d packets, want %d", step, got, wantV6)
		}
	}
	check("start", 2, 3, 4)
	if err := e.Add(Rule{Action: ActionPass, Src: netip.MustParsePrefix("198.51.100.0/24")}, Rule{Action: ActionDrop, Src: netip.MustParsePrefix("2001:db8:1::/48")}); err != nil {
		t.Fatal(err)
	}
	check("after Add", 2, 3, 4)
	if err := e.Delete(kParse(t, "drop tcp dport 80").Rules[0]); err != nil {
		t.Fatal(err)
	}
	check("after Delete", 2, 3, 4)
	if err := e.Apply(kParse(t, "drop src 2001:db8::/32\ndrop udp dport 53\ndrop src 192.0.2.0/24\ndrop icmp")); err != nil {
		t.Fatal(err)
	}
	check("after Apply of a reordered set", 2, 3, 4)
	r := kParse(t, "drop src 192.0.2.0/24").Rules[0]
	if err := e.Replace(r, Rule{Action: ActionPass, Src: r.Src}); err != nil {
		t.Fatal(err)
	}
	if err := e.Replace(Rule{Action: ActionPass, Src: r.Src}, r); err != nil {
		t.Fatal(err)
	}
	check("after replacing the v4 prefix rule and back", 2, 0, 4)
	send(t, e, v4, 1)
	check("after one more frame", 2, 1, 4)
}

func TestAddDeleteReplace(t *testing.T) {
	e := newTestEngine(t, testOptions)
	mustApply(t, e, kParse(t, "drop udp dport 53\ndrop src 192.0.2.0/24"))
	dns := frames.UDP4("192.0.2.1", "10.0.0.1", 1000, 53, 10).Bytes
	gre := spec4("192.0.2.1", "10.0.0.1", 47, 0, 0).Build().Bytes
	expect := func(step string, frame []byte, want Result) {
		t.Helper()
		got, err := newRunner(e).run(frame)
		if err != nil {
			t.Fatal(err)
		}
		if got.Result != want {
			t.Errorf("%s: %v, want %v", step, got, want)
		}
	}
	expect("start", dns, kCompound(ActionDrop, 0))
	expect("start", gre, kPrefix(ActionDrop, 1))

	// Add puts compound rules last.
	if err := e.Add(kParse(t, "pass udp src 192.0.2.0/24\npass proto 47").Rules...); err != nil {
		t.Fatal(err)
	}
	expect("after Add", dns, kCompound(ActionDrop, 0))
	expect("after Add", gre, kCompound(ActionPass, 3))
	// Replace keeps the position.
	if err := e.Replace(kParse(t, "drop udp dport 53").Rules[0], kParse(t, "pass udp dport 53-54").Rules[0]); err != nil {
		t.Fatal(err)
	}
	expect("after Replace", dns, kCompound(ActionPass, 0))
	if err := e.Delete(kParse(t, "pass udp dport 53-54\npass proto 47").Rules...); err != nil {
		t.Fatal(err)
	}
	rs, err := e.RuleSet()
	if err != nil {
		t.Fatal(err)
	}
	if got := ruleSetText(rs); got != "policy pass\nmalformed pass\ndrop src 192.0.2.0/24 # 0, origin drop\npass udp src 192.0.2.0/24 # 1, origin drop\n" {
		t.Errorf("rule set after Delete:\n%s", got)
	}
	expect("after Delete", dns, kCompound(ActionPass, 1))
	expect("after Delete", gre, kPrefix(ActionDrop, 0))

	// Errors change nothing.
	err = e.Delete(kParse(t, "drop icmp").Rules[0])
	if !errors.Is(err, ErrRuleNotFound) {
		t.Errorf("Delete of a missing rule: %v, want ErrRuleNotFound", err)
	}
	err = e.Add(Rule{Action: ActionPass, Src: netip.MustParsePrefix("192.0.2.0/24")})
	if !errors.Is(err, ErrDuplicatePrefix) {
		t.Errorf("Add of a prefix twice: %v, want ErrDuplicatePrefix", err)
	}
	err = e.Apply(&RuleSet{Policy: ActionPass, Malformed: ActionRedirect})
	if err == nil {
		t.Error("Apply of malformed redirect: no error")
	}
	expect("after errors", gre, kPrefix(ActionDrop, 0))
}

// TestMaxRulesLimit: a MaxRules whose counters the program could not
// index is refused before anything is created, and the error names the
// largest that fits (see TestCapacityLimits).
func TestMaxRulesLimit(t *testing.T) {
	_, err := New(Options{MaxRules: 1 << 26})
	if err == nil || !strings.Contains(err.Error(), "room for 67108864 rules asked: capacity exceeded: one fast-drop program holds at most 16777208") {
		t.Fatalf("New with MaxRules 1<<26: %v, want the limit", err)
	}
}

// TestCapacityErrors: a full table is refused with ErrCapacity, and the
// error says in plain words which table and how big it was loaded (a CLI
// user cannot act on Options field names).
func TestCapacityErrors(t *testing.T) {
	e := newTestEngine(t, Options{MaxRules: 100, IPv4Blocks: 4, IPv4HostBlocks: 4, IPv6Entries: 1024})
	many := func(n int, f func(i int) string) *RuleSet {
		var b strings.Builder
		for i := range n {
			b.WriteString(f(i) + "\n")
		}
		return kParse(t, b.String())
	}
	for _, tc := range []struct {
		name string
		rs   *RuleSet
		want string
	}{
		{"rules", many(101, func(i int) string { return fmt.Sprintf("drop src 10.0.%d.0/24", i) }), "room for 100 rules; load the program again with bigger tables"},
		{"IPv4 blocks", many(5, func(i int) string { return fmt.Sprintf("drop src 10.0.%d.16/28", i) }), "IPv4 prefixes longer than /24 in 5 different /24s: capacity exceeded: the program was loaded with room for them in 4 /24s"},
		{"IPv4 host blocks", many(5, func(i int) string { return fmt.Sprintf("drop src 10.0.%d.1", i) }), "IPv4 host routes in 5 different /24s: capacity exceeded: the program was loaded with room for host routes in 4 /24s"},
		// 12 hosts in one /24 are more than a sparse group holds.
		{"IPv4 hosts, dense", many(12*5, func(i int) string { return fmt.Sprintf("drop src 10.0.%d.%d", i/12, 1+i%12) }), "IPv4 prefixes longer than /24 in 5 different /24s"},
		{"IPv4 blocks, all", many(4, func(i int) string { return fmt.Sprintf("drop src 10.0.%d.16/28", i) }), ""},
		// A complete replacement needs both sets' groups and slots at once.
		{"IPv4 blocks, all replaced", many(4, func(i int) string { return fmt.Sprintf("drop src 10.1.%d.16/28", i) }), ""},
		{"IPv4 host blocks, all", many(4, func(i int) string { return fmt.Sprintf("drop src 10.0.%d.1", i) }), ""},
		{"IPv4 host blocks, all replaced", many(4, func(i int) string { return fmt.Sprintf("drop src 10.1.%d.1", i) }), ""},
		{"rules, all replaced", many(100, func(i int) string { return fmt.Sprintf("drop src 2001:db8:%x::/48", i) }), ""},
	} {
		err := e.Apply(tc.rs)
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if !errors.Is(err, ErrCapacity) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrCapacity saying %q", tc.name, err, tc.want)
		}
	}
	// The last good set is in force.
	got, err := newRunner(e).run(spec6("2001:db8:5::1", "2001:db8::1", 47, 0, 0).Build().Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if got.Result != kPrefix(ActionDrop, 5) {
		t.Errorf("after capacity errors: %v", got)
	}
	if err := e.Apply(many(5, func(i int) string { return fmt.Sprintf("drop src 10.2.%d.1", i) })); !errors.Is(err, ErrCapacity) {
		t.Errorf("IPv4 blocks after a replacement: %v, want ErrCapacity", err)
	}
	big := Options{MaxRules: 100, IPv4Blocks: 4, IPv6Entries: 1024}
	e2 := newTestEngine(t, big)
	rs := &RuleSet{}
	base := netip.MustParseAddr("2001:db8:ffff:ffff:ffff:ffff:ffff:ffff").As16()
	for i := range 400 {
		a := base
		a[15] = byte(i)
		a[14] = byte(i >> 8)
		p, _ := netip.AddrFrom16(a).Prefix(32 + i%96)
		if !slices.ContainsFunc(rs.Rules, func(r Rule) bool { return r.Src == p }) {
			rs.Rules = append(rs.Rules, Rule{Action: ActionDrop, Src: p})
		}
	}
	err = e2.Apply(rs)
	if !errors.Is(err, ErrCapacity) {
		t.Errorf("IPv6 table overflow: %v, want ErrCapacity", err)
	}
}

// pinEngine pins what Open needs, as the loader does.
func pinEngine(t testing.TB, e *Engine) string {
	t.Helper()
	dir := testenv.TempPinDir(t)
	for name, m := range e.Maps() {
		if err := m.Pin(filepath.Join(dir, name)); err != nil {
			t.Fatalf("pin %s: %v", name, err)
		}
	}
	if err := e.Program().Pin(filepath.Join(dir, "xdp_fastdrop")); err != nil {
		t.Fatalf("pin program: %v", err)
	}
	return dir
}

// TestOpen: a second process (here a second Engine from the pins) sees the
// rule set, policies and counters, and its changes reach the program and
// the first Engine.
func TestOpen(t *testing.T) {
	e := newTestEngine(t, testOptions)
	text := `
policy drop
malformed drop
drop udp dport 53 src 10.0.0.0/8
pass src 10.1.0.0/16
drop src 10.1.2.0/24
pass tcp dport 22
drop src 2001:db8::/32
pass proto 47 dst 2001:db8::1
`
	mustApply(t, e, kParse(t, text))
	dns := frames.UDP4("10.1.2.3", "10.0.0.1", 1000, 53, 10).Bytes
	send(t, e, dns, 4)
	dir := pinEngine(t, e)

	o, err := Open(dir)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := o.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	want, _ := e.RuleSet()
	got, err := o.RuleSet()
	if err != nil {
		t.Fatal(err)
	}
	if ruleSetText(got) != ruleSetText(want) {
		t.Errorf("reopened rule set:\n%s\nwant:\n%s", ruleSetText(got), ruleSetText(want))
	}
	if c := ruleCount(t, counters(t, o), "drop udp src 10.0.0.0/8 dport 53"); c.Packets != 4 {
		t.Errorf("reopened counters: %+v, want 4 packets", c)
	}
	if o.Program() == nil {
		t.Error("Open found no program")
	}

	// A change through the reopened engine...
	if err := o.Add(kParse(t, "drop src 10.1.2.3").Rules[0]); err != nil {
		t.Fatalf("Add through Open: %v", err)
	}
	if err := o.Delete(kParse(t, "pass tcp dport 22").Rules[0]); err != nil {
		t.Fatalf("Delete through Open: %v", err)
	}
	// ...is what the program does, and what the first engine reports.
	now, err := e.RuleSet()
	if err != nil {
		t.Fatal(err)
	}
	if n := len(now.Rules); n != 6 {
		t.Errorf("first engine sees %d rules after the change, want 6:\n%s", n, ruleSetText(now))
	}
	r, m := newRunner(e), NewModel(now)
	gre := spec4("10.1.2.3", "10.0.0.1", 47, 0, 0).Build().Bytes
	for _, f := range [][]byte{dns, gre, frames.TCP4("10.9.9.9", "10.0.0.1", 1, 22, 0).Bytes} {
		got, err := r.run(f)
		if err != nil {
			t.Fatal(err)
		}
		if w := m.Eval(f); got.Result != w {
			t.Errorf("frame %x: kernel %v, model %v", f, got, w)
		}
	}
	if c := ruleCount(t, counters(t, e), "drop udp src 10.0.0.0/8 dport 53"); c.Packets != 5 {
		t.Errorf("counters after the change: %+v, want 5 packets", c)
	}
	// And the first engine can change it again.
	if err := e.Apply(kParse(t, "drop udp dport 53 src 10.0.0.0/8")); err != nil {
		t.Fatal(err)
	}
	if rs, _ := o.RuleSet(); len(rs.Rules) != 1 || rs.EffectivePolicy() != ActionPass {
		t.Errorf("reopened engine after Apply: %s", ruleSetText(rs))
	}
}

// TestRecordLayout checks the hand-written rule record encoding against the
// struct bpf2go generated from struct fd_rule_rec.
func TestRecordLayout(t *testing.T) {
	r := kParse(t, "drop tcp src 2001:db8::/32 sport 1-2 dst 2001:db8:1::1 dport 3-4").Rules[0]
	r.Line = 77
	var b [recSize]byte
	encodeRecord(b[:], &r, 5, 7, 9)
	var rec gen.FastdropFdRuleRec
	if _, err := binary.Decode(b[:], binary.LittleEndian, &rec); err != nil {
		t.Fatal(err)
	}
	if binary.Size(rec) != recSize {
		t.Fatalf("struct fd_rule_rec is %d bytes, want %d", binary.Size(rec), recSize)
	}
	want := gen.FastdropFdRuleRec{Action: 1, Flags: recFlagSrc | recFlagDst | recFlagProto | recFlagSport | recFlagDport,
		Proto: 6, SrcLen: 32, DstLen: 128, Family: 6, GenAdded: 7, GenRemoved: 9, SportLo: 1, SportHi: 2, DportLo: 3, DportHi: 4,
		Line: 77, Order: 5, Src: netip.MustParseAddr("2001:db8::").As16(), Dst: netip.MustParseAddr("2001:db8:1::1").As16()}
	if rec != want {
		t.Errorf("decoded %+v\nwant    %+v", rec, want)
	}
	back, order, added, removed, ok := decodeRecord(b[:])
	if !ok || order != 5 || added != 7 || removed != 9 || back.String() != r.String() || back.Line != 77 {
		t.Errorf("decodeRecord: %s order %d generations %d-%d ok %v", back.String(), order, added, removed, ok)
	}
	for _, tc := range []struct {
		added, removed, g uint32
		live              bool
	}{
		{7, 0, 7, true}, {7, 0, 6, false}, {7, 9, 8, true}, {7, 9, 9, false},
		{0xfffffffe, 0, 3, true}, {0xfffffffe, 2, 1, true}, {0xfffffffe, 2, 2, false},
	} {
		if got := recLive(tc.added, tc.removed, tc.g); got != tc.live {
			t.Errorf("recLive(%d, %d, %d) = %v", tc.added, tc.removed, tc.g, got)
		}
	}
	if n := binary.Size(gen.FastdropFdV6Ent{}); n != v6EntSize {
		t.Errorf("struct fd_v6_ent is %d bytes, want %d", n, v6EntSize)
	}

	// Each match field's members of the record, as its table entry has
	// them, are where the object's BTF has them.
	spec, err := gen.LoadFastdrop()
	if err != nil {
		t.Fatal(err)
	}
	var st *btf.Struct
	if err := spec.Types.TypeByName("fd_rule_rec", &st); err != nil {
		t.Fatal(err)
	}
	members := map[string]btf.Member{}
	for _, m := range st.Members {
		members[m.Name] = m
	}
	for i := range matchFields {
		f := &matchFields[i]
		if f.encode == nil || f.decode == nil {
			t.Errorf("%s: no record encoding", f.name)
		}
		if f.recFlag == 0 && len(f.rec) == 0 {
			t.Errorf("%s: neither a flag nor members in the record", f.name)
		}
		for _, rm := range f.rec {
			m, ok := members[rm.name]
			if !ok {
				t.Errorf("%s: struct fd_rule_rec has no member %s", f.name, rm.name)
				continue
			}
			size, err := btf.Sizeof(m.Type)
			if err != nil {
				t.Fatal(err)
			}
			if int(m.Offset.Bytes()) != rm.off || size != rm.width {
				t.Errorf("%s: fd_rule_rec.%s is %d bytes at %d, the table says %d at %d", f.name, rm.name, size, m.Offset.Bytes(), rm.width, rm.off)
			}
		}
		// Each field's examples survive the record (and its lists, if it
		// has any, fd_rule_lists' value).
		for _, ex := range f.examples {
			r := kParse(t, ex).Rules[0]
			var b [recSize]byte
			encodeRecord(b[:], &r, 1, 2, 0)
			back, _, _, _, _ := decodeRecord(b[:])
			lists := encodeLists(&r)
			if (lists != nil) != (binary.LittleEndian.Uint32(b[recFlags:])&recFlagLists != 0) {
				t.Errorf("%s: %q: lists %v but the record's FD_REC_LISTS says otherwise", f.name, ex, lists != nil)
			}
			if lists != nil {
				if len(lists) != listsSize {
					t.Errorf("%s: %q: lists of %d bytes", f.name, ex, len(lists))
				}
				if err := decodeLists(lists, &back); err != nil {
					t.Fatal(err)
				}
			}
			back.Line = r.Line
			if !reflect.DeepEqual(back, r) {
				t.Errorf("%s: %q comes back from the record as %q", f.name, ex, back.String())
			}
		}
	}
}

// TestDuplicatePrefixes: a prefix in two prefix rules is refused, by Apply
// and by Add, naming both rules, and nothing changes.
func TestDuplicatePrefixes(t *testing.T) {
	e := newTestEngine(t, testOptions)
	base := kParse(t, "drop src 192.0.2.0/24\ndrop udp dport 53")
	mustApply(t, e, base)
	for _, prefixes := range [][2]string{
		{"10.0.0.0/8", "10.0.0.0/8"},
		{"10.1.2.3/32", "10.1.2.3/32"},
		{"0.0.0.0/0", "0.0.0.0/0"},
		{"2001:db8::/32", "2001:db8::/32"},
		{"::/0", "::/0"},
	} {
		rs := &RuleSet{Rules: []Rule{
			{Action: ActionDrop, Src: netip.MustParsePrefix("198.51.100.0/24")},
			{Action: ActionDrop, Src: netip.MustParsePrefix(prefixes[0])},
			{Action: ActionDrop, Dst: netip.MustParsePrefix("203.0.113.0/24"), Proto: 17, HasProto: true},
			{Action: ActionPass, Src: netip.MustParsePrefix(prefixes[1])},
		}}
		err := e.Apply(rs)
		if !errors.Is(err, ErrDuplicatePrefix) || !strings.Contains(err.Error(), "rule 3 (pass src "+prefixes[1]+")") || !strings.Contains(err.Error(), "also rule 1") {
			t.Errorf("Apply with %s twice: %v", prefixes[0], err)
		}
		err = e.Add(rs.Rules[1], rs.Rules[3])
		if !errors.Is(err, ErrDuplicatePrefix) {
			t.Errorf("Add of %s twice: %v", prefixes[0], err)
		}
	}
	if err := e.Add(Rule{Action: ActionPass, Src: netip.MustParsePrefix("192.0.2.0/24")}); !errors.Is(err, ErrDuplicatePrefix) {
		t.Errorf("Add of a prefix in force with another action: %v", err)
	}
	if rs, _ := e.RuleSet(); ruleSetText(rs) != ruleSetText(base) {
		t.Errorf("after the errors:\n%s", ruleSetText(rs))
	}
	got, err := newRunner(e).run(spec4("192.0.2.1", "10.0.0.1", 47, 0, 0).Build().Bytes)
	if err != nil || got.Result != kPrefix(ActionDrop, 0) {
		t.Errorf("after the errors: %v %v", got, err)
	}
}

// TestHostRoutes follows a /24 through the forms DIR-24-8 gives it as host
// routes come and go: a sparse group while it holds at most sparseMax
// hosts and nothing else longer than /24, a tbl8 group past that, and a
// plain entry once nothing longer is left, checking the program's verdicts
// at each step.
func TestHostRoutes(t *testing.T) {
	e := newTestEngine(t, testOptions)
	i24 := uint32(198)<<16 | 51<<8 | 100
	form := func() string {
		switch v := e.v4.tbl24[i24]; {
		case isSparse(v):
			return "sparse"
		case isDense(v):
			return "dense"
		}
		return "plain"
	}
	expect := func(step, wantForm string, cases map[string]Result) {
		t.Helper()
		if got := form(); got != wantForm {
			t.Errorf("%s: the /24 is %s, want %s", step, got, wantForm)
		}
		for src, want := range cases {
			got, err := newRunner(e).run(frames.UDP4(src, "10.0.0.1", 1000, 53, 10).Bytes)
			if err != nil {
				t.Fatal(err)
			}
			if got.Result.Verdict != want.Verdict || got.Result.Class != want.Class {
				t.Errorf("%s: %s gets %v, want %v", step, src, got, want)
			}
		}
	}
	drop, pass := kPrefix(ActionDrop, 0), kPrefix(ActionPass, 0)
	mustApply(t, e, kParse(t, "drop src 198.51.100.0/24\npass src 198.51.100.7"))
	expect("one host", "sparse", map[string]Result{"198.51.100.7": pass, "198.51.100.8": drop, "198.51.101.7": kDefault(ActionPass)})

	var hosts []Rule
	for i := range sparseMax {
		hosts = append(hosts, kParse(t, fmt.Sprintf("pass src 198.51.100.%d", 100+i)).Rules...)
	}
	if err := e.Add(hosts[:sparseMax-1]...); err != nil {
		t.Fatal(err)
	}
	expect("a full sparse group", "sparse", map[string]Result{"198.51.100.7": pass, "198.51.100.100": pass, "198.51.100.99": drop})
	if err := e.Add(hosts[sparseMax-1]); err != nil {
		t.Fatal(err)
	}
	last := fmt.Sprintf("198.51.100.%d", 100+sparseMax-1)
	expect("one host more", "dense", map[string]Result{"198.51.100.7": pass, last: pass, "198.51.100.99": drop})

	// A covering prefix changes the val of the addresses no host takes.
	if err := e.Delete(kParse(t, "drop src 198.51.100.0/24").Rules...); err != nil {
		t.Fatal(err)
	}
	expect("without the /24", "dense", map[string]Result{last: pass, "198.51.100.99": kDefault(ActionPass)})
	if err := e.Add(kParse(t, "drop src 198.51.0.0/16").Rules...); err != nil {
		t.Fatal(err)
	}
	expect("under a /16", "dense", map[string]Result{last: pass, "198.51.100.99": drop})

	// A whole replacement lays hosts out afresh; then a /28 needs a group.
	mustApply(t, e, kParse(t, "drop src 198.51.0.0/16\npass src 198.51.100.7\npass src 198.51.100.200"))
	expect("replaced", "sparse", map[string]Result{"198.51.100.200": pass, "198.51.100.199": drop})
	if err := e.Add(kParse(t, "pass src 198.51.100.16/28").Rules...); err != nil {
		t.Fatal(err)
	}
	expect("with a /28", "dense", map[string]Result{"198.51.100.200": pass, "198.51.100.17": pass, "198.51.100.99": drop})
	if err := e.Delete(kParse(t, "pass src 198.51.100.16/28\npass src 198.51.100.7\npass src 198.51.100.200").Rules...); err != nil {
		t.Fatal(err)
	}
	expect("no hosts left", "plain", map[string]Result{"198.51.100.200": drop})

	// From a plain /24, a host makes a sparse group, and its removal
	// takes it away again.
	if err := e.Add(kParse(t, "pass src 198.51.100.9").Rules...); err != nil {
		t.Fatal(err)
	}
	expect("a host again", "sparse", map[string]Result{"198.51.100.9": pass, "198.51.100.10": drop})
	if err := e.Delete(kParse(t, "pass src 198.51.100.9").Rules...); err != nil {
		t.Fatal(err)
	}
	expect("and gone", "plain", map[string]Result{"198.51.100.9": drop})
}

// TestRebuildAfterChanges: a table filled by changes alone (never built
// whole) and then rebuilt whole must not keep entries of the old prefixes.
// Found by TestDifferential with seeds 1 and 2: the rebuild skipped
// clearing tbl24 because only a whole build marked it as written, so
// 59.209.121.186 still matched a removed 0.0.0.0/1 and a stale entry
// pointed to a freed sparse group.
func TestRebuildAfterChanges(t *testing.T) {
	e := newTestEngine(t, testOptions)
	check := func(step string, cases map[string]Result) {
		t.Helper()
		for src, want := range cases {
			got, err := newRunner(e).run(frames.UDP4(src, "10.0.0.1", 1000, 53, 10).Bytes)
			if err != nil {
				t.Fatal(err)
			}
			if got.Result != want {
				t.Errorf("%s: %s gets %v, want %v", step, src, got.Result, want)
			}
		}
	}
	// Changed in place: a /1 costs 8M entries, a change of a few rules
	// less than a rebuild.
	mustApply(t, e, kParse(t, "drop src 0.0.0.0/1\npass src 59.1.2.3\ndrop src 59.1.2.0/25"))
	// byLen is made by the first change in place and dropped by a whole
	// build: it tells which path each Apply took.
	if !e.v4.byLenValid {
		t.Fatal("the first rule set was built whole; the test needs it changed in place")
	}
	check("changed in place", map[string]Result{
		"59.209.121.186": kPrefix(ActionDrop, 0), "59.1.2.3": kPrefix(ActionPass, 1),
		"59.1.2.4": kPrefix(ActionDrop, 2), "59.7.7.7": kPrefix(ActionDrop, 0),
	})
	// Removing the /1 costs more in place than a rebuild.
	mustApply(t, e, kParse(t, "drop src 10.0.0.0/8\npass src 10.1.2.3"))
	if e.v4.byLenValid {
		t.Fatal("the second rule set was changed in place; the test needs a whole rebuild")
	}
	check("rebuilt", map[string]Result{
		"59.209.121.186": kDefault(ActionPass), "59.1.2.3": kDefault(ActionPass),
		"59.1.2.4": kDefault(ActionPass), "10.1.2.3": kPrefix(ActionPass, 1),
		"10.1.2.4": kPrefix(ActionDrop, 0),
	})
}

// TestBothScalesAtOnce loads what the issue asks to hold at once, 1M IPv4
// and 1M IPv6 source prefixes and 256 compound rules, in one rule set, and
// checks the program against the model on frames from inside prefixes of
// both families, from nowhere, and built for the compound rules.
func TestBothScalesAtOnce(t *testing.T) {
	n := 1_000_000
	if testing.Short() {
		n = 50_000 // the same mix, smaller
	}
	v4, _ := v4Mix(n, 11)
	v6, _ := v6Mix(n, 12)
	rs := &RuleSet{Rules: append(compoundMix(256), PrefixRules(ActionDrop, append(v4, v6...))...)}
	for i := range rs.Rules {
		if i%3 == 2 && rs.Rules[i].IsPrefixOnly() {
			rs.Rules[i].Action = ActionPass // both actions among the prefixes
		}
	}
	e := newTestEngine(t, CapacityFor(rs, 1.1))
	mustApply(t, e, rs)
	m := NewModel(rs)
	r := newRunner(e)
	rng := rand.New(rand.NewPCG(13, 14))
	inside := func(p netip.Prefix) netip.Addr {
		b := p.Addr().AsSlice()
		for bit := p.Bits(); bit < len(b)*8; bit++ {
			if rng.IntN(2) == 0 {
				b[bit/8] ^= 0x80 >> (bit % 8)
			}
		}
		a, _ := netip.AddrFromSlice(b)
		return a
	}
	classes := map[ResultClass]int{}
	for i := range 6000 {
		var f []byte
		switch i % 4 {
		case 0:
			f = benchFrame4(inside(v4[rng.IntN(len(v4))]))
		case 1:
			f = benchFrame6(inside(v6[rng.IntN(len(v6))]))
		case 2:
			f = benchFrame(missAddrRand(rng, i%8 == 2))
		default: // compoundMix has "drop udp dport N" for N = 1010, 1020, ...
			src := netip.AddrFrom4([4]byte{byte(1 + rng.IntN(223)), byte(rng.Uint32()), byte(rng.Uint32()), byte(rng.Uint32())})
			f = frame64(frames.Spec{Src: src, Dst: netip.MustParseAddr("198.51.100.1"), Proto: frames.ProtoUDP,
				SrcPort: 40000, DstPort: uint16(1000 + 10*(1+rng.IntN(25)))}.Build())
		}
		got, err := r.run(f)
		if err != nil {
			t.Fatal(err)
		}
		if want := m.Eval(f); got.Result != want {
			t.Fatalf("frame %d: kernel %v, model %v", i, got, want)
		}
		classes[got.Class]++
	}
	t.Logf("6000 frames, the same decision as the model; decided by %v", classes)
	if classes[ClassPrefix] < 2000 || classes[ClassCompound] == 0 || classes[ClassDefault] == 0 {
		t.Errorf("decided by: %v; want prefixes of both families, compound rules and the policy each to decide some", classes)
	}
}

// missAddrRand is a random address of either family, usually in a part of
// the space no prefix of v4Mix or v6Mix covers.
func missAddrRand(rng *rand.Rand, v6 bool) netip.Addr {
	if v6 {
		var b [16]byte
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		b[0] = 0x30 | b[0]&0x0f // 3000::/4, outside v6Mix's 2000::/4
		return netip.AddrFrom16(b)
	}
	return netip.AddrFrom4([4]byte{byte(224 + rng.IntN(16)), byte(rng.Uint32()), byte(rng.Uint32()), byte(rng.Uint32())})
}
