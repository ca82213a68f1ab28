package fastdrop

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdpdrop/xdpdrop/gen"
)

// TestCaptureFeature: FD_FEAT_CAPTURE follows fd_main's cap_active in both
// halves, across rule-set swaps (whose fd_conf writes know nothing of
// captures) and for rules' sample modifiers, so frames take the full path
// (the one with the capture hook) exactly while something samples.
func TestCaptureFeature(t *testing.T) {
	e := newTestEngine(t, testOptions)
	main := e.maps[gen.FastdropMapFdMain]
	halves := func() (on [2]bool) {
		t.Helper()
		for h := range uint32(2) {
			c, err := readConf(e.mem.ctl, h)
			require.NoError(t, err)
			on[h] = c.Features&featCapture != 0
		}
		return on
	}
	capWord := func(f func(w uint32) uint32) {
		t.Helper()
		require.NoError(t, e.mem.ctl.access(int64(capActiveOff), 4, func(b []byte) { word(b).Store(f(word(b).Load())) }))
	}
	apply := func(text string) {
		t.Helper()
		require.NoError(t, e.Apply(mustParse(t, text)))
	}
	off, on := [2]bool{}, [2]bool{true, true}

	apply("drop udp dport 53\n")
	require.Equal(t, off, halves(), "no capture: the plain path")

	// A capture starts (package capture sets its slot's bit, then syncs).
	capWord(func(w uint32) uint32 { return w | 1<<3 })
	require.NoError(t, SyncCapture(main))
	require.Equal(t, on, halves())
	apply("drop udp dport 54\n")
	apply("drop udp dport 55\n")
	require.Equal(t, on, halves(), "swaps rewrite both halves' fd_conf and keep the flag")

	// It ends.
	capWord(func(w uint32) uint32 { return w &^ (1 << 3) })
	require.NoError(t, SyncCapture(main))
	require.Equal(t, off, halves(), "the last capture's end puts frames back on the plain path")
	apply("drop udp dport 56\n")
	require.Equal(t, off, halves())

	// A rule's sample modifier is a capture too, set by the engine itself.
	apply("drop udp dport 11211 sample 1/1000\n")
	require.Equal(t, on, halves())
	apply("drop udp dport 11211\n")
	require.Equal(t, off, halves())
}
