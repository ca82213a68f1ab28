package fastdrop

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

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

	_, err = tt.Test(make([]byte, 10))
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
