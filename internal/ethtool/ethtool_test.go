package ethtool_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xdpdrop/xdpdrop/internal/ethtool"
	"github.com/xdpdrop/xdpdrop/internal/testenv"
)

// TestVeth reads and sets what the benchmarks and the sandbox rely on, on
// a veth pair of its own: the driver's name, its statistics, and GRO.
func TestVeth(t *testing.T) {
	testenv.RequireRoot(t)
	v := testenv.NewVeth(t, testenv.VethOptions{Queues: 2})
	s, err := ethtool.Open()
	require.NoError(t, err)
	defer s.Close()

	drv, n, err := s.Driver(v.Name)
	require.NoError(t, err)
	assert.Equal(t, "veth", drv)
	assert.Positive(t, n, "veth has statistics")

	st, err := s.Stats(v.Name)
	require.NoError(t, err)
	assert.Contains(t, st, "peer_ifindex")
	assert.EqualValues(t, v.PeerIndex, st["peer_ifindex"])
	assert.Contains(t, st, "rx_queue_1_xdp_packets", "per-queue statistics of both queues")

	for _, on := range []bool{true, false, true} {
		require.NoError(t, s.SetGRO(v.Name, on))
		got, err := s.GRO(v.Name)
		require.NoError(t, err)
		assert.Equal(t, on, got, "GRO after SetGRO(%v)", on)
	}
}

func TestErrors(t *testing.T) {
	s, err := ethtool.Open()
	require.NoError(t, err)
	defer s.Close()
	_, _, err = s.Driver(strings.Repeat("x", 16))
	assert.EqualError(t, err, `interface name "xxxxxxxxxxxxxxxx" too long`)
	_, err = s.Stats("xdd-no-such0")
	assert.ErrorContains(t, err, "ethtool -i xdd-no-such0: no such device")
	_, err = s.GRO("xdd-no-such0")
	assert.ErrorContains(t, err, "ethtool -k xdd-no-such0: no such device")
	assert.ErrorContains(t, s.SetGRO("xdd-no-such0", false), "ethtool -K xdd-no-such0 gro off: no such device")
}
