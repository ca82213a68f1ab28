package fastdrop

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"

	"github.com/xdpdrop/xdpdrop/gen"
	"github.com/xdpdrop/xdpdrop/internal/frames"
)

// newClockEngine loads the traced program with the test clock (set to
// start) and applies rules.
func newClockEngine(t *testing.T, rules string, start time.Duration) (*Engine, *runner) {
	t.Helper()
	opts := testOptions
	opts.testClock = true
	opts.LimitSources, opts.Bans = 1024, 256
	e := newTestEngine(t, opts)
	setClock(t, e, start)
	return e, mustApply(t, e, kParse(t, rules))
}

func setClock(t *testing.T, e *Engine, at time.Duration) {
	t.Helper()
	if err := e.setTestClock(uint64(at)); err != nil {
		t.Fatalf("set test clock: %v", err)
	}
}

// verdicts runs frame n times and counts the passes.
func passes(t *testing.T, r *runner, frame []byte, n int) int {
	t.Helper()
	p := 0
	for range n {
		res, err := r.run(frame)
		if err != nil {
			t.Fatal(err)
		}
		if res.Verdict == ActionPass {
			p++
		}
	}
	return p
}

// TestLimitTokenBucket: a fresh bucket lets its burst through at once,
// then the rate: with the clock held, exactly the burst passes; each
// 1/rate of time adds one frame; a long pause refills only to the burst.
func TestLimitTokenBucket(t *testing.T) {
	e, r := newClockEngine(t, "limit 1000/s burst 5 udp dport 53\n", time.Hour)
	f := frames.UDP4("198.51.100.1", "10.0.0.1", 1000, 53, 10).Bytes
	if got := passes(t, r, f, 20); got != 5 {
		t.Fatalf("clock held: %d of 20 passed, want the burst, 5", got)
	}
	// 10 ms at 1000/s: 10 more frames' worth, but the bucket holds 5.
	setClock(t, e, time.Hour+10*time.Millisecond)
	if got := passes(t, r, f, 20); got != 5 {
		t.Fatalf("after 10 ms: %d of 20 passed, want 5 (the burst caps the refill)", got)
	}
	// 1 ms at a time: one frame each.
	for i := 1; i <= 3; i++ {
		setClock(t, e, time.Hour+10*time.Millisecond+time.Duration(i)*time.Millisecond)
		if got := passes(t, r, f, 4); got != 1 {
			t.Fatalf("after %d ms more: %d passed, want 1", i, got)
		}
	}
	// Other traffic is not policed.
	if res, err := r.run(frames.UDP4("198.51.100.1", "10.0.0.1", 1000, 54, 10).Bytes); err != nil || res.Verdict != ActionPass || res.Class != ClassDefault {
		t.Fatalf("unmatched frame: %v %v", res, err)
	}
	c, err := e.Counters()
	if err != nil {
		t.Fatal(err)
	}
	lc := c.Rules[0].Limit
	if lc == nil {
		t.Fatal("no limit counters for a limit rule")
	}
	if lc.Conform.Packets != 13 || lc.Exceed.Packets != 39 {
		t.Fatalf("limit counters %+v, want 13 conforming, 39 exceeding", *lc)
	}
	if c.Rules[0].Packets != 52 || c.Drop.Packets != 39 || c.Pass.Packets != 13+1 {
		t.Fatalf("counters: rule %d, drop %d, pass %d; want 52, 39, 14", c.Rules[0].Packets, c.Drop.Packets, c.Pass.Packets)
	}
	if lc.Exceed.Bytes != 39*uint64(len(f)) {
		t.Fatalf("exceeding bytes %d, want %d", lc.Exceed.Bytes, 39*len(f))
	}
	// Removed, its counts stay in the verdicts'.
	if err := e.Apply(kParse(t, "drop tcp\n")); err != nil {
		t.Fatal(err)
	}
	if c, err = e.Counters(); err != nil {
		t.Fatal(err)
	}
	if c.Drop.Packets != 39 || c.Pass.Packets != 14 {
		t.Fatalf("after the rule went: drop %d, pass %d; want 39, 14", c.Drop.Packets, c.Pass.Packets)
	}
}

// TestLimitBytes: a byte rate's burst is in bytes.
func TestLimitBytes(t *testing.T) {
	_, r := newClockEngine(t, "limit 8mbit/s burst 10kbyte udp\n", time.Hour)
	f := frames.UDP4("198.51.100.1", "10.0.0.1", 1000, 53, 958).Bytes // 1000 bytes
	if len(f) != 1000 {
		t.Fatalf("frame of %d bytes", len(f))
	}
	if got := passes(t, r, f, 30); got != 10 {
		t.Fatalf("%d frames of 1000 bytes passed, want 10 (burst 10kbyte)", got)
	}
}

// TestLimitPerSource: each source (or source /24) has its own bucket.
func TestLimitPerSource(t *testing.T) {
	_, r := newClockEngine(t, "limit 100/s burst 3 per src udp dport 53\nlimit 100/s burst 4 per src/24 udp dport 54\n", time.Hour)
	a := frames.UDP4("198.51.100.1", "10.0.0.1", 1000, 53, 10).Bytes
	b := frames.UDP4("198.51.100.2", "10.0.0.1", 1000, 53, 10).Bytes
	if got := passes(t, r, a, 10); got != 3 {
		t.Fatalf("source a: %d passed, want 3", got)
	}
	if got := passes(t, r, b, 10); got != 3 {
		t.Fatalf("source b after a used its bucket: %d passed, want 3", got)
	}
	// per src/24: .1 and .2 share one bucket, 203.0.113.1 has its own.
	a24 := frames.UDP4("198.51.100.1", "10.0.0.1", 1000, 54, 10).Bytes
	b24 := frames.UDP4("198.51.100.2", "10.0.0.1", 1000, 54, 10).Bytes
	c24 := frames.UDP4("203.0.113.1", "10.0.0.1", 1000, 54, 10).Bytes
	if got := passes(t, r, a24, 2) + passes(t, r, b24, 10); got != 4 {
		t.Fatalf("one /24: %d passed, want 4", got)
	}
	if got := passes(t, r, c24, 10); got != 4 {
		t.Fatalf("another /24: %d passed, want 4", got)
	}
	// IPv6, per address.
	v6 := frames.UDP6("2001:db8::1", "2001:db8::2", 1000, 53, 10).Bytes
	v6b := frames.UDP6("2001:db8::3", "2001:db8::2", 1000, 53, 10).Bytes
	if got := passes(t, r, v6, 10) + passes(t, r, v6b, 10); got != 6 {
		t.Fatalf("two IPv6 sources: %d passed, want 6", got)
	}
}

// TestLimitBan: a source over its limit is banned: all its frames
// dropped before the rules, others' not; unban lifts it; the ban ends by
// itself; rule changes keep it.
func TestLimitBan(t *testing.T) {
	start := time.Hour
	e, r := newClockEngine(t, "limit 100/s burst 2 per src ban 1s icmp\npass udp\n", start)
	icmp := spec4("198.51.100.7", "10.0.0.1", frames.ProtoICMP, 0, 0).Build().Bytes
	udp := frames.UDP4("198.51.100.7", "10.0.0.1", 1000, 53, 10).Bytes
	other := frames.UDP4("198.51.100.8", "10.0.0.1", 1000, 53, 10).Bytes
	if got := passes(t, r, icmp, 3); got != 2 {
		t.Fatalf("%d of 3 passed, want the burst, 2", got)
	}
	// Banned now: its UDP (which "pass udp" would pass) too.
	res, err := r.run(udp)
	if err != nil || res.Verdict != ActionDrop || res.Class != ClassBan {
		t.Fatalf("banned source's UDP: %v %v, want drop by ban", res, err)
	}
	if res, err := r.run(other); err != nil || res.Verdict != ActionPass {
		t.Fatalf("another source: %v %v, want pass", res, err)
	}
	bans, err := e.Bans()
	if err != nil {
		t.Fatal(err)
	}
	if len(bans) != 1 || bans[0].Source != netip.MustParsePrefix("198.51.100.7/32") || bans[0].Dropped != 1 ||
		bans[0].Left != time.Second || !strings.HasPrefix(bans[0].Rule, "limit 100/s burst 2 per src ban 1s") {
		t.Fatalf("bans %+v", bans)
	}
	c, err := e.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if c.Rules[0].Limit.Bans != 1 || c.Banned.Packets != 1 {
		t.Fatalf("bans made %d, banned frames %d; want 1, 1", c.Rules[0].Limit.Bans, c.Banned.Packets)
	}

	// A rule change keeps the ban; so does replacing the limit rule.
	if err := e.Apply(kParse(t, "limit 100/s burst 2 per src ban 2s icmp\ndrop tcp\npass udp\n")); err != nil {
		t.Fatal(err)
	}
	r = newRunner(e)
	if res, err := r.run(udp); err != nil || res.Class != ClassBan {
		t.Fatalf("after rules changed: %v %v, want still banned", res, err)
	}
	if bans, err := e.Bans(); err != nil || len(bans) != 1 || bans[0].Rule != "" {
		t.Fatalf("after its rule went: %+v %v, want one ban of no rule", bans, err)
	}

	// It ends after its second.
	setClock(t, e, start+time.Second+time.Millisecond)
	if res, err := r.run(udp); err != nil || res.Verdict != ActionPass || res.Class != ClassCompound {
		t.Fatalf("after the ban: %v %v, want pass udp", res, err)
	}
	if bans, err := e.Bans(); err != nil || len(bans) != 0 {
		t.Fatalf("bans after expiry: %+v %v", bans, err)
	}

	// Banned again (the new rule, 2 s), and lifted by Unban.
	if got := passes(t, r, icmp, 3); got != 2 {
		t.Fatalf("%d of 3 passed, want 2", got)
	}
	if res, _ := r.run(udp); res.Class != ClassBan {
		t.Fatalf("not banned again: %v", res)
	}
	lifted, err := e.Unban(netip.MustParsePrefix("198.51.100.7/32"), false)
	if err != nil || len(lifted) != 1 {
		t.Fatalf("Unban: %v %v", lifted, err)
	}
	if res, _ := r.run(udp); res.Verdict != ActionPass {
		t.Fatalf("after unban: %v, want pass", res)
	}
}

func TestLimitOpenKeepsPolicers(t *testing.T) {
	e, _ := newClockEngine(t, "limit 1000/s burst 5 per src/24 ban 10s udp dport 53\nlimit 5mbit/s tcp\n", time.Hour)
	e.mu.Lock()
	e.loaded = false // read back from the records, as Open does
	e.mu.Unlock()
	rs, err := e.RuleSet()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"limit 1000/s burst 5 per src/24 ban 10s udp dport 53", "limit 5mbit/s tcp"}
	for i, r := range rs.Rules {
		if r.String() != want[i] {
			t.Errorf("rule %d read back as %q, want %q", i, r.String(), want[i])
		}
	}
	r := newRunner(e)
	f := frames.UDP4("198.51.100.1", "10.0.0.1", 1000, 53, 10).Bytes
	if got := passes(t, r, f, 10); got != 5 {
		t.Fatalf("%d passed after reading back, want 5", got)
	}
}

// TestLimitRecordLayout: the limit members of the record are where the
// object's BTF has them, and a limit survives the record.
func TestLimitRecordLayout(t *testing.T) {
	spec, err := gen.LoadFastdrop()
	if err != nil {
		t.Fatal(err)
	}
	var st *btf.Struct
	if err := spec.Types.TypeByName("fd_rule_rec", &st); err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"lim_rate": recLimRate, "lim_burst": recLimBurst, "lim_ban_ms": recLimBan, "lim_police": recLimPolice,
		"lim_flags": recLimFlags, "lim_len4": recLimLen4, "lim_len6": recLimLen6}
	for _, m := range st.Members {
		if off, ok := want[m.Name]; ok {
			if int(m.Offset.Bytes()) != off {
				t.Errorf("fd_rule_rec.%s at %d, police.go says %d", m.Name, m.Offset.Bytes(), off)
			}
			delete(want, m.Name)
		}
	}
	if len(want) > 0 {
		t.Errorf("fd_rule_rec lacks %v", want)
	}
	for _, text := range []string{
		"limit 1000/s udp dport 53", "limit 100mbit/s udp sport 123", "limit 50/s per src tcp dport 443",
		"limit 10000/s per src/24 udp", "limit 200/s burst 400 per src ban 1m icmp", "limit 2mbyte/s burst 64kbyte per src/24/64 udp",
		"limit 5/s per src/48 ban 1500ms udp src 2001:db8::/32",
	} {
		r := kParse(t, text).Rules[0]
		var b [recSize]byte
		encodeRecord(b[:], &r, 1, 9, 0)
		encodeLimit(b[:], r.Limit, 7)
		back, _, _, _, _ := decodeRecord(b[:])
		l, idx, epoch := decodeLimit(b[:])
		back.Limit = l
		if back.String() != r.String() || idx != 7 || epoch != 9 {
			t.Errorf("%q comes back as %q (entry %d, epoch %d)", r.String(), back.String(), idx, epoch)
		}
	}
}

// TestLimitTickClock: the policers' clock moves in steps of a jiffy (4 ms
// at HZ=250); a bucket shallower than a step still lets its rate through
// on average, not its depth per step: limit 50000/s burst 5 is 200 frames
// per 4 ms step, not 5.
func TestLimitTickClock(t *testing.T) {
	var res unix.Timespec
	if err := unix.ClockGetres(unix.CLOCK_MONOTONIC_COARSE, &res); err != nil {
		t.Fatal(err)
	}
	tick := time.Duration(res.Nano())
	opts := testOptions
	opts.testClock, opts.testTicks = true, true
	e := newTestEngine(t, opts)
	start := time.Hour
	setClock(t, e, start)
	r := mustApply(t, e, kParse(t, "limit 50000/s burst 5 udp dport 53\nlimit 50000/s burst 5 per src udp dport 54\n"))
	agg := frames.UDP4("198.51.100.1", "10.0.0.1", 1000, 53, 10).Bytes
	src := frames.UDP4("198.51.100.1", "10.0.0.1", 1000, 54, 10).Bytes
	perStep := int(50000 * tick / time.Second)
	const steps = 20
	total := map[string]int{}
	for i := 1; i <= steps; i++ {
		// Anywhere inside the step: the policers see its start.
		setClock(t, e, start+time.Duration(i)*tick+tick/3)
		for name, f := range map[string][]byte{"aggregate": agg, "per src": src} {
			got := passes(t, r, f, perStep+50)
			total[name] += got
			if got < perStep-1 || got > perStep+5+1 {
				t.Errorf("%s, step %d: %d passed, want about %d (the rate over a %v step)", name, i, got, perStep, tick)
			}
		}
	}
	for name, got := range total {
		if want := steps * perStep; got < want || got > want+perStep+5 {
			t.Errorf("%s: %d passed over %d steps, want %d to %d", name, got, steps, want, want+perStep+5)
		}
	}
}

// TestLimitSpoofedFlood: the per-source table is of a fixed size; a flood
// of one-frame spoofed sources, each making a bucket (counted), takes the
// buckets that would be full soonest, so a source still over its rate
// keeps its state (its frames stay dropped) and the aggregate limit holds.
func TestLimitSpoofedFlood(t *testing.T) {
	opts := testOptions
	opts.testClock = true
	opts.LimitSources, opts.Bans = 64, 256
	e := newTestEngine(t, opts)
	start := time.Hour
	setClock(t, e, start)
	r := mustApply(t, e, kParse(t, "limit 10/s burst 5 per src udp dport 53\nlimit 1000/s burst 50 udp dport 54\n"))
	heavy := frames.UDP4("203.0.113.9", "10.0.0.1", 1000, 53, 10).Bytes
	agg := frames.UDP4("203.0.113.9", "10.0.0.1", 1000, 54, 10).Bytes
	if got := passes(t, r, heavy, 20); got != 5 {
		t.Fatalf("heavy source: %d of 20 passed, want its burst, 5", got)
	}
	if got := passes(t, r, agg, 60); got != 50 {
		t.Fatalf("aggregate: %d of 60 passed, want 50", got)
	}
	const spoofed = 5000
	for i := range spoofed {
		at := start + time.Duration(i)*time.Microsecond // 5 ms in all
		if i%100 == 0 {
			setClock(t, e, at)
		}
		f := frames.UDP4(fmt.Sprintf("10.%d.%d.%d", i>>16, i>>8&255, i&255), "10.0.0.1", 1000, 53, 10).Bytes
		if res, err := r.run(f); err != nil || res.Verdict != ActionPass {
			t.Fatalf("spoofed source %d: %v %v, want pass (a fresh bucket)", i, res, err)
		}
	}
	setClock(t, e, start+spoofed*time.Microsecond)
	if got := passes(t, r, heavy, 10); got != 0 {
		t.Errorf("heavy source after %d spoofed ones in a table of 64: %d of 10 passed, want 0 (its bucket kept)", spoofed, got)
	}
	if got := passes(t, r, agg, 10); got != 5 {
		t.Errorf("aggregate after the flood: %d of 10 passed, want 5 (5 ms at 1000/s)", got)
	}
	c, err := e.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if lc := c.Rules[0].Limit; lc == nil || lc.Sources != spoofed+1 || lc.Conform.Packets != spoofed+5 ||
		lc.Evicted < spoofed+1-64 || lc.Evicted > spoofed {
		t.Errorf("per-source rule's counters %+v, want %d buckets made, %d conforming, %d to %d evicted", lc, spoofed+1, spoofed+5, spoofed+1-64, spoofed)
	}
}

// TestLimitTableQuarterFull: with the per-source table a quarter full
// (2,048 sources in 8,192 buckets) every source keeps its bucket while
// the sources take turns, as the live-frames generator sends them: a set
// that overflows makes its sources evict each other on every frame, and
// an evicted source's next frame takes a fresh bucket and passes, so a
// source over its rate would get all its frames through. Sets of 4 (the
// old layout) overflowed for about 2% of the sources at this load; sets
// of 8 for about 0.1% at most.
func TestLimitTableQuarterFull(t *testing.T) {
	opts := testOptions
	opts.testClock = true
	opts.LimitSources = 8192
	e := newTestEngine(t, opts)
	setClock(t, e, time.Hour) // and no time passes: every bucket stays empty
	r := mustApply(t, e, kParse(t, "limit 1/s burst 1 per src udp dport 53\n"))
	const sources, rounds = 2048, 5
	src := make([][]byte, sources)
	for i := range src {
		src[i] = frames.UDP4(fmt.Sprintf("10.1.%d.%d", i>>8, i&255), "10.0.0.1", 1000, 53, 10).Bytes
	}
	passed := 0
	for round := range rounds {
		for _, f := range src {
			res, err := r.run(f)
			if err != nil {
				t.Fatal(err)
			}
			if res.Verdict == ActionPass && round > 0 {
				passed++
			}
		}
	}
	c, err := e.Counters()
	if err != nil {
		t.Fatal(err)
	}
	lc := c.Rules[0].Limit
	t.Logf("%d sources, %d rounds: %d frames after the first round passed, %d buckets made, %d evicted", sources, rounds, passed, lc.Sources, lc.Evicted)
	if limit := sources * (rounds - 1) / 200; passed > limit {
		t.Errorf("%d of the %d frames after each source's first passed, want at most %d (0.5%%): sources lose their buckets to each other", passed, sources*(rounds-1), limit)
	}
	if lc.Sources > sources+sources/200 {
		t.Errorf("%d buckets made for %d sources, want at most %d", lc.Sources, sources, sources+sources/200)
	}
}
