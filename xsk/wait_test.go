package xsk

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseWaitMode(t *testing.T) {
	for _, m := range []WaitMode{WaitAdaptive, WaitBlock, WaitPoll, WaitSpin} {
		got, err := ParseWaitMode(m.String())
		require.NoError(t, err)
		require.Equal(t, m, got)
	}
	_, err := ParseWaitMode("nap")
	require.ErrorIs(t, err, ErrInvalidOptions)
}
