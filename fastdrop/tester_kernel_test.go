package fastdrop

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/xdpdrop/xdpdrop/gen"
	"github.com/xdpdrop/xdpdrop/internal/frames"
	"github.com/xdpdrop/xdpdrop/internal/testenv"
)

// TestTester checks the public test-run API against the model on the
// cases `xdpdrop test` reports: each stage, each verdict, and frame sizes
// the kernel cannot take.
func TestTester(t *testing.T) {
	testenv.RequireRoot(t)
	rs, err := Parse(strings.NewReader("policy pass\ndrop udp dport 11211\ndrop src 203.0.113.0/24\npass src 203.0.113.7\n"), "t.rules")
	require.NoError(t, err)
	tt, err := NewTester(rs)
	require.NoError(t, err)
	defer tt.Close()
	m := NewModel(rs)
	for _, tc := range []struct {
		name  string
		frame []byte
		want  Result
	}{
		{"compound", frames.UDP4("192.0.2.1", "198.18.0.1", 1, 11211, 18).Bytes, Result{ActionDrop, ClassCompound, 0}},
		{"prefix", frames.TCP4("203.0.113.9", "198.18.0.1", 1, 80, 0).Bytes, Result{ActionDrop, ClassPrefix, 1}},
		{"longer prefix", frames.TCP4("203.0.113.7", "198.18.0.1", 1, 80, 0).Bytes, Result{ActionPass, ClassPrefix, 2}},
		{"default", frames.UDP6("2001:db8::1", "2001:db8::2", 1, 53, 18).Bytes, Result{ActionPass, ClassDefault, -1}},
		{"malformed", frames.UDP4("192.0.2.1", "198.18.0.1", 1, 11211, 18).CorruptIPv4IHL(3).Bytes, Result{ActionPass, ClassMalformed, -1}},
	} {
		got, err := tt.Test(tc.frame)
		require.NoError(t, err, tc.name)
		require.Equal(t, tc.want, got, tc.name)
		require.Equal(t, m.Eval(tc.frame), got, "%s: the kernel agrees with the model", tc.name)
	}
	c, err := tt.Counters()
	require.NoError(t, err)
	require.Equal(t, uint64(1), c.Rules[0].Packets)

	// Shorter than an Ethernet header: malformed, as docs/RULES.md says
	// (the kernel takes no such frame, so it is judged without it).
	runt, err := tt.Test(make([]byte, 10))
	require.NoError(t, err)
	require.Equal(t, Result{ActionPass, ClassMalformed, -1}, runt)
	require.Equal(t, m.Eval(make([]byte, 10)), runt)
	// More than a test run takes (1 + MAX_SKB_FRAGS pages).
	_, err = tt.Test(make([]byte, 80000))
	require.ErrorIs(t, err, ErrFrameSize)
	// Jumbo frames are taken (as multi-buffer XDP).
	for _, n := range []int{1514, 9000, 60000} {
		big := make([]byte, n)
		copy(big, frames.UDP4("192.0.2.1", "198.18.0.1", 1, 11211, 18).Bytes)
		got, err := tt.Test(big)
		require.NoError(t, err, "%d bytes", n)
		require.Equal(t, ActionDrop, got.Verdict, "%d bytes", n)
	}
}

// TestTesterJumboFrames: a valid 9,000-byte frame gets the verdict of its
// headers, as the attached program gives it on a veth with MTU 9000; a test
// run hands such a frame over in several buffers (the first 3,520 bytes
// linear), and a program that is not frags-aware judged it malformed
// because its IP total length reaches past the first buffer.
func TestTesterJumboFrames(t *testing.T) {
	testenv.RequireRoot(t)
	rs, err := Parse(strings.NewReader("policy pass\ndrop udp dport 11211\ndrop tcp dport 22\ndrop src 2001:db8:bad::/48\n"), "t.rules")
	require.NoError(t, err)
	tt, err := NewTester(rs)
	require.NoError(t, err)
	defer tt.Close()
	m := NewModel(rs)

	udp := frames.UDP4("192.0.2.1", "198.18.0.1", 1, 11211, 9000-14-20-8)
	tcp := frames.TCP6("2001:db8::1", "2001:db8::2", 40000, 22, 9000-14-40-20)
	pfx := frames.UDP6("2001:db8:bad::1", "2001:db8::2", 40000, 53, 9000-14-40-8)
	other := frames.UDP4("192.0.2.1", "198.18.0.1", 1, 53, 9000-14-20-8)
	for _, f := range []frames.Frame{udp, tcp, pfx, other} {
		require.Len(t, f.Bytes, 9000)
	}
	for _, tc := range []struct {
		name  string
		frame []byte
		want  Result
	}{
		{"IPv4 UDP, compound rule", udp.Bytes, Result{ActionDrop, ClassCompound, 0}},
		{"IPv6 TCP, compound rule", tcp.Bytes, Result{ActionDrop, ClassCompound, 1}},
		{"IPv6 UDP, prefix rule", pfx.Bytes, Result{ActionDrop, ClassPrefix, 2}},
		{"IPv4 UDP, policy", other.Bytes, Result{ActionPass, ClassDefault, -1}},
		// The length checks count the whole frame, in every buffer.
		{"IPv4 total length past the end", udp.Clone().CorruptIPv4TotalLen(9000 - 14 + 1).FixIPv4Checksum().Bytes, Result{ActionPass, ClassMalformed, -1}},
		{"cut short by one byte", udp.Bytes[:8999], Result{ActionPass, ClassMalformed, -1}},
	} {
		got, err := tt.Test(tc.frame)
		require.NoError(t, err, tc.name)
		require.Equal(t, tc.want, got, tc.name)
		require.Equal(t, m.Eval(tc.frame), got, "%s: the kernel agrees with the model", tc.name)
	}
	c, err := tt.Counters()
	require.NoError(t, err)
	require.Equal(t, uint64(1), c.Rules[0].Packets)
	require.Equal(t, uint64(9000), c.Rules[0].Bytes, "a jumbo frame is counted at its whole length")

	// Headers are read from the first buffer only (3,520 bytes in a test
	// run, as on veth): an IPv6 frame whose extension headers run past it
	// is malformed, as docs/RULES.md says; the model, which knows no
	// buffers, reads on.
	deep := frames.Spec{
		Src: netip.MustParseAddr("2001:db8::1"), Dst: netip.MustParseAddr("2001:db8::2"),
		IPv6Ext: []frames.ExtHeader{{Type: frames.ProtoHopByHop, Len: 2048}, {Type: frames.ProtoDestOpts, Len: 2048}},
		Proto:   frames.ProtoTCP, SrcPort: 40000, DstPort: 22, Payload: frames.Pattern(4000),
	}.Build()
	require.Greater(t, deep.L4, 3520)
	got, err := tt.Test(deep.Bytes)
	require.NoError(t, err)
	require.Equal(t, Result{ActionPass, ClassMalformed, -1}, got)
	require.Equal(t, Result{ActionDrop, ClassCompound, 1}, m.Eval(deep.Bytes))
	// The same headers within the first buffer are read.
	deep = frames.Spec{
		Src: netip.MustParseAddr("2001:db8::1"), Dst: netip.MustParseAddr("2001:db8::2"),
		IPv6Ext: []frames.ExtHeader{{Type: frames.ProtoHopByHop, Len: 2048}, {Type: frames.ProtoDestOpts, Len: 1024}},
		Proto:   frames.ProtoTCP, SrcPort: 40000, DstPort: 22, Payload: frames.Pattern(6000),
	}.Build()
	got, err = tt.Test(deep.Bytes)
	require.NoError(t, err)
	require.Equal(t, Result{ActionDrop, ClassCompound, 1}, got)
}

// TestTesterCaptured: a frame cut by a capture's snap length is judged at
// its length on the wire when its headers were captured, and refused with
// ErrCutHeaders when the cut falls inside them.
func TestTesterCaptured(t *testing.T) {
	testenv.RequireRoot(t)
	rs, err := Parse(strings.NewReader("malformed drop\ndrop udp dport 11211\n"), "t.rules")
	require.NoError(t, err)
	tt, err := NewTester(rs)
	require.NoError(t, err)
	defer tt.Close()

	whole := frames.UDP4("192.0.2.1", "198.18.0.1", 1, 11211, 1472).Bytes
	got, err := tt.TestCaptured(whole[:96], len(whole))
	require.NoError(t, err)
	require.Equal(t, Result{ActionDrop, ClassCompound, 0}, got, "judged at 1514 bytes")
	got, err = tt.Test(whole[:96])
	require.NoError(t, err)
	require.Equal(t, ClassMalformed, got.Class, "at 96 bytes the IP total length reaches past the end")
	// Cut inside the UDP header (at 14 + 20 + 4 bytes of 8).
	_, err = tt.TestCaptured(whole[:38], len(whole))
	require.ErrorIs(t, err, ErrCutHeaders)
	require.ErrorContains(t, err, "38 of 1514 bytes captured, the headers need 42")
	// Right after the headers is enough.
	got, err = tt.TestCaptured(whole[:42], len(whole))
	require.NoError(t, err)
	require.Equal(t, ClassCompound, got.Class)
	// A frame whose own length is too short stays malformed.
	bad := frames.UDP4("192.0.2.1", "198.18.0.1", 1, 11211, 1472).CorruptIPv4TotalLen(1600).Bytes
	got, err = tt.TestCaptured(bad[:96], len(bad))
	require.NoError(t, err)
	require.Equal(t, Result{ActionDrop, ClassMalformed, -1}, got)
	// Not cut: the same as Test.
	got, err = tt.TestCaptured(whole, len(whole))
	require.NoError(t, err)
	require.Equal(t, ClassCompound, got.Class)
}

// TestTesterLimitTicks: `xdpdrop test` polices as the attached program
// does, whose clock is jiffies and whose buckets are a tick deeper than
// their burst (fd_pol_now): a capture's frames against "limit 1000/s
// burst 5", in bursts and then 100 µs apart, get frame for frame the
// verdicts of that policer (GCRA on the capture's clock in steps of a tick, depth burst +
// a tick), which passes more than the same bucket on an exact clock
// without the extra tick (what the tester did before).
func TestTesterLimitTicks(t *testing.T) {
	testenv.RequireRoot(t)
	var res unix.Timespec
	require.NoError(t, unix.ClockGetres(unix.CLOCK_MONOTONIC_COARSE, &res))
	tick := uint64(res.Nano())
	rs := kParse(t, "limit 1000/s burst 5 udp dport 53\n")
	tt, err := NewTester(rs)
	require.NoError(t, err)
	defer tt.Close()
	cost, burst, _, _ := rs.Rules[0].Limit.police()
	const unit = 1 << gen.FastdropFdLayoutFD_POL_TIME_SHIFT // per ns
	// policer is the kernel's bucket in 1/16 ns: steps of step ns (0: an
	// exact clock) and a depth of burst + extra.
	type policer struct{ tat, step, extra uint64 }
	judge := func(p *policer, ns uint64) bool {
		if p.step > 0 {
			ns -= ns % p.step
		}
		now := ns * unit
		at := max(p.tat, now)
		if at+cost > now+burst+p.extra {
			return false
		}
		p.tat = at + cost
		return true
	}
	kernel := &policer{step: tick, extra: tick * unit}
	exact := &policer{}
	frame := frames.UDP4("198.51.100.1", "10.0.0.1", 1000, 53, 18).Bytes
	first := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	// Ten bursts of 50 frames at one instant, 100 ms apart (each after
	// the bucket has filled: the kernel passes its burst and a tick's
	// worth), then a frame every 100 µs for 200 ms.
	var at []time.Duration
	for b := range 10 {
		for range 50 {
			at = append(at, time.Duration(b)*100*time.Millisecond)
		}
	}
	for i := range 2000 {
		at = append(at, time.Second+time.Duration(i)*100*time.Microsecond)
	}
	var got, want, exactPassed int
	for i, d := range at {
		require.NoError(t, tt.SetTime(first.Add(d)))
		r, err := tt.Test(frame)
		require.NoError(t, err)
		ns := uint64(clockStart + d)
		k := judge(kernel, ns)
		if judge(exact, ns) {
			exactPassed++
		}
		require.Equal(t, k, r.Verdict == ActionPass, "frame %d at %v: the tester's verdict %v, the kernel's policer passes: %v", i, d, r.Verdict, k)
		if r.Verdict == ActionPass {
			got++
		}
		if k {
			want++
		}
	}
	t.Logf("%d frames over 1.2 s: %d passed (the kernel's policer: %d; an exact clock without the extra tick: %d)", len(at), got, want, exactPassed)
	require.Greater(t, got, exactPassed, "the extra tick shows in the counts")
}
