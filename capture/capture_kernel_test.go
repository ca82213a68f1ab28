package capture_test

import (
	"errors"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/xdpdrop/xdpdrop/capture"
	"github.com/xdpdrop/xdpdrop/fastdrop"
	"github.com/xdpdrop/xdpdrop/internal/frames"
	"github.com/xdpdrop/xdpdrop/internal/testenv"
)

// newEngine loads the drop program (test runs only: nothing attached)
// with rules.
func newEngine(t *testing.T, rules string) (*fastdrop.Engine, capture.Maps) {
	t.Helper()
	testenv.RequireRoot(t)
	e, err := fastdrop.New(fastdrop.Options{MaxRules: 64, IPv4Blocks: 16, IPv4HostBlocks: 16, IPv6Entries: 64})
	require.NoError(t, err)
	t.Cleanup(func() { e.Close() })
	rs, err := fastdrop.Parse(strings.NewReader(rules), "test.rules")
	require.NoError(t, err)
	require.NoError(t, e.Apply(rs))
	m, err := capture.MapsOf(e.Maps())
	require.NoError(t, err)
	return e, m
}

// run test-runs the program on frame n times and checks the verdict.
func run(t *testing.T, e *fastdrop.Engine, frame []byte, n int, want uint32) {
	t.Helper()
	// On one CPU: sampling counts 1 in N per CPU, so frames spread over
	// two CPUs (a goroutine moves between threads and threads between
	// CPUs, more so on a loaded machine) give one sample fewer now and
	// then (CI: 9 of 100 frames at 1 in 10).
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var old, one unix.CPUSet
	require.NoError(t, unix.SchedGetaffinity(0, &old))
	for cpu := 0; cpu < 1024; cpu++ {
		if old.IsSet(cpu) {
			one.Set(cpu)
			break
		}
	}
	require.NoError(t, unix.SchedSetaffinity(0, &one))
	defer func() { require.NoError(t, unix.SchedSetaffinity(0, &old)) }()
	for range n {
		got, err := e.Program().Run(&ebpf.RunOptions{Data: frame})
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
}

// readAll reads samples until none comes for a moment.
func readAll(t *testing.T, c *capture.Capture) []capture.Sample {
	t.Helper()
	var out []capture.Sample
	for {
		var s capture.Sample
		err := c.Read(time.Now().Add(100*time.Millisecond), &s)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return out
		}
		require.NoError(t, err)
		s.Data = append([]byte(nil), s.Data...)
		out = append(out, s)
	}
}

const xdpDrop, xdpPass = 1, 2

// TestCaptureSelects: a capture gets exactly the frames its selection
// names (verdict, rule, 1 in N), each with its bytes, length, verdict and
// rule slot; counts add up; closing leaves no registration.
func TestCaptureSelects(t *testing.T) {
	e, m := newEngine(t, "drop udp dport 11211\ndrop udp dport 19\n")
	_, slots, err := e.RuleSlots()
	require.NoError(t, err)
	memcached := frames.UDP4("198.51.100.1", "192.0.2.9", 1000, 11211, 18).Bytes
	chargen := frames.UDP4("198.51.100.1", "192.0.2.9", 1000, 19, 18).Bytes
	dns := frames.UDP4("198.51.100.1", "192.0.2.9", 1000, 53, 18).Bytes

	drops, err := capture.Start(m, capture.Selection{Verdicts: capture.VerdictDrop})
	require.NoError(t, err)
	defer drops.Close()
	rule, err := capture.Start(m, capture.Selection{RuleSlot: slots[1], Snaplen: 20})
	require.NoError(t, err)
	defer rule.Close()
	every := capture.Selection{Verdicts: capture.VerdictPass, Every: 4}
	sampled, err := capture.Start(m, every)
	require.NoError(t, err)
	defer sampled.Close()
	reg, err := capture.Registrations(m.Main)
	require.NoError(t, err)
	require.Equal(t, uint32(1<<drops.Slot()|1<<rule.Slot()|1<<sampled.Slot()), reg)

	run(t, e, memcached, 3, xdpDrop)
	run(t, e, chargen, 2, xdpDrop)
	run(t, e, dns, 8, xdpPass)

	got := readAll(t, drops)
	require.Len(t, got, 5)
	for i, s := range got {
		want := memcached
		if i >= 3 {
			want = chargen
		}
		require.Equal(t, want, s.Data)
		require.Equal(t, len(want), s.Length)
		require.Equal(t, capture.VerdictDrop, s.Verdict)
		require.Equal(t, "drop", s.VerdictName())
		require.True(t, s.RuleMatched)
		require.Equal(t, slots[i/3], s.Slot)
		require.WithinDuration(t, time.Now(), s.Time, 5*time.Second)
	}
	got = readAll(t, rule)
	require.Len(t, got, 2)
	require.Equal(t, chargen[:20], got[0].Data, "snap length")
	require.Equal(t, len(chargen), got[0].Length)

	got = readAll(t, sampled)
	require.Len(t, got, 2, "1 in 4 of 8 passed frames")
	require.True(t, got[0].Default)

	st, err := sampled.Stats()
	require.NoError(t, err)
	require.Equal(t, capture.Stats{Seen: 8, Sent: 2}, st)

	require.NoError(t, drops.Close())
	require.NoError(t, rule.Close())
	require.NoError(t, sampled.Close())
	reg, err = capture.Registrations(m.Main)
	require.NoError(t, err)
	require.Zero(t, reg, "no registration left")
	st, err = sampled.Stats()
	require.NoError(t, err)
	require.Equal(t, uint64(8), st.Seen, "final counts after Close")
}

// TestCaptureFullRing: a ring nobody reads fills up; the program counts
// what it could not send and every verdict stays right.
func TestCaptureFullRing(t *testing.T) {
	e, m := newEngine(t, "drop udp dport 11211\n")
	c, err := capture.Start(m, capture.Selection{})
	require.NoError(t, err)
	defer c.Close()
	big := frames.UDP4("198.51.100.1", "192.0.2.9", 1000, 11211, 1400).Bytes
	// Each sample takes its bytes, a 40-byte header and 8 of the ring's.
	n := capture.RingBytes/(len(big)+48) + 100
	run(t, e, big, n, xdpDrop)
	st, err := c.Stats()
	require.NoError(t, err)
	require.Equal(t, uint64(n), st.Seen)
	require.Equal(t, uint64(n), st.Sent+st.Lost)
	require.Greater(t, st.Lost, uint64(50))
	require.Len(t, readAll(t, c), int(st.Sent))
}

// TestCaptureSlotsRunOut: every slot taken, the next capture is refused
// with ErrNoSlot; a closed one frees its slot.
func TestCaptureSlotsRunOut(t *testing.T) {
	_, m := newEngine(t, "drop udp dport 11211\n")
	var cs []*capture.Capture
	for range capture.Slots {
		c, err := capture.Start(m, capture.Selection{})
		require.NoError(t, err)
		cs = append(cs, c)
	}
	_, err := capture.Start(m, capture.Selection{})
	require.ErrorIs(t, err, capture.ErrNoSlot)
	require.NoError(t, cs[3].Close())
	c, err := capture.Start(m, capture.Selection{})
	require.NoError(t, err)
	require.Equal(t, 3, c.Slot())
	cs[3] = c
	for _, c := range cs {
		require.NoError(t, c.Close())
	}
}

// TestRuleSamples: a rule's sample modifier sends 1 in N of its frames to
// the rule samples' ring with no capture registered, where they wait for
// ReadRuleSamples; the program tests for it only while such a rule is in
// force.
func TestRuleSamples(t *testing.T) {
	e, m := newEngine(t, "drop udp dport 11211 sample 1/10\ndrop udp dport 19\n")
	rs, slots, err := e.RuleSlots()
	require.NoError(t, err)
	require.Equal(t, uint32(10), rs.Rules[0].Sample)
	reg, err := capture.Registrations(m.Main)
	require.NoError(t, err)
	require.Equal(t, uint32(1<<15), reg, "only the rule samples' bit")

	memcached := frames.UDP4("198.51.100.1", "192.0.2.9", 1000, 11211, 18).Bytes
	chargen := frames.UDP4("198.51.100.1", "192.0.2.9", 1000, 19, 18).Bytes
	run(t, e, memcached, 100, xdpDrop)
	run(t, e, chargen, 50, xdpDrop)

	// Read after the fact: the samples waited in the ring.
	c, err := capture.ReadRuleSamples(m)
	require.NoError(t, err)
	defer c.Close()
	_, err = capture.ReadRuleSamples(m)
	require.ErrorIs(t, err, capture.ErrRuleSamplesBusy, "one reader at a time")
	got := readAll(t, c)
	require.Len(t, got, 10, "1 in 10 of 100 frames")
	for _, s := range got {
		require.True(t, s.RuleSample)
		require.Equal(t, slots[0], s.Slot)
		require.Equal(t, memcached, s.Data)
		require.Equal(t, capture.VerdictDrop, s.Verdict)
	}
	st, err := c.Stats()
	require.NoError(t, err)
	require.Equal(t, capture.Stats{Seen: 10, Sent: 10}, st)

	// A capture at the same time gets its own frames, not these.
	d, err := capture.Start(m, capture.Selection{RuleSlot: slots[1]})
	require.NoError(t, err)
	run(t, e, chargen, 3, xdpDrop)
	require.Len(t, readAll(t, d), 3)
	require.NoError(t, d.Close())

	// Without sample modifiers the program no longer looks.
	rs2, err := fastdrop.Parse(strings.NewReader("drop udp dport 11211\n"), "t")
	require.NoError(t, err)
	require.NoError(t, e.Apply(rs2))
	reg, err = capture.Registrations(m.Main)
	require.NoError(t, err)
	require.Zero(t, reg)
	run(t, e, memcached, 20, xdpDrop)
	require.Empty(t, readAll(t, c))
	require.NoError(t, c.Close())
	c, err = capture.ReadRuleSamples(m)
	require.NoError(t, err, "the reader's claim is released on Close")
	require.NoError(t, c.Close())
}
