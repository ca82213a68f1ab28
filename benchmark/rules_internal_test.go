package benchmark

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdpdrop/xdpdrop/fastdrop"
)

// TestBlocklist: n distinct prefix rules, one of which drops the generated
// traffic, valid as a rule set, and the same on every call.
func TestBlocklist(t *testing.T) {
	rs := blocklist(5000)
	require.Len(t, rs.Rules, 5000)
	require.NoError(t, rs.Validate())
	require.Equal(t, trafficPrefix, rs.Rules[0].Src)
	m := fastdrop.NewModel(rs)
	f := buildFrame(GenJob{Src: srcAddr, Dst: dstAddr, SrcPort: srcPort, DstPort: dstPort,
		SrcMAC: []byte{2, 0, 0, 0, 0, 2}, DstMAC: []byte{2, 0, 0, 0, 0, 1}}, 64)
	require.Len(t, f, 60)
	res := m.Eval(f)
	require.Equal(t, fastdrop.ActionDrop, res.Verdict)
	require.Equal(t, 0, res.Rule)
	again := blocklist(5000)
	require.Equal(t, rs.Rules, again.Rules)
}
